"""Automatic differentiation by reverse computing: the whole public AD API.

==========================  ===========================================================
:mod:`.reverse`             ``grad``, ``value_and_grad``, ``jacobian``, ``vjp``,
                            ``check_grad``: the forward run, then the reverse sweep
:mod:`.forward`             ``jvp``: the tangent of the forward run (forward mode)
:mod:`.second_order`        ``hvp``, ``hessian``: the tangent of the forward run and its
                            reverse sweep, in one program
:mod:`.batch`, :mod:`.gpu`  ``batch=`` (one compiled loop over items, on every core) and
                            ``device="cuda"`` (one GPU thread per item)
:mod:`.external`            ``external``: a plain function made reversible,
                            differentiated by its own adjoint
:mod:`.custom`              ``custom_adjoint``, ``remove_adjoint``: a reverse sweep of
                            your own for a reversible function
:mod:`.sweep`               the internal sweep API all of the above share: running the
                            reverse sweep on copies, seeding the loss, checking that it
                            gave the inputs back
==========================  ===========================================================

Every name here is also ``revbench.<name>``.
"""

from revbench.ad.custom import custom_adjoint, remove_adjoint
from revbench.ad.external import external
from revbench.ad.forward import jvp
from revbench.ad.reverse import check_grad, grad, jacobian, value_and_grad, vjp
from revbench.ad.second_order import hessian, hvp

__all__ = ["check_grad", "custom_adjoint", "external", "grad", "hessian", "hvp", "jacobian",
           "jvp", "remove_adjoint", "value_and_grad", "vjp"]
