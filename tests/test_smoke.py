"""The contract's first example, end to end on both backends."""

import numpy as np
import pytest

import revbench


def test_poly_forward_inverse(make):
    poly = make("""
        def poly(y, x):
            t = 0.0
            t += x * x
            y += 3.0 * t + x
            t -= x * x
            del t
    """)
    assert poly(0.0, 2.0) == (14.0, 2.0)
    assert (~poly)(*poly(0.0, 2.0)) == pytest.approx((0.0, 2.0))
    assert ~~poly is poly
    assert isinstance(poly(0.0, 2.0), tuple)


def test_arrays_updated_in_place_and_same_objects_returned(make):
    f = make("""
        def axpy(y, a, x):
            for i in range(len(x)):
                y[i] += a * x[i]
    """)
    y, x = np.zeros(4), np.arange(4.0)
    out = f(y, 2.0, x)
    assert out[0] is y and out[2] is x
    np.testing.assert_array_equal(y, 2.0 * x)
    (~f)(y, 2.0, x)
    np.testing.assert_array_equal(y, np.zeros(4))


def test_import_does_not_load_numba():
    import subprocess
    import sys

    code = "import sys, revbench; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_public_api():
    for name in ("reversible", "ReversibilityError", "ReversibilitySyntaxError", "set_tolerance",
                 "register", "check_inverse", "define"):
        assert hasattr(revbench, name)
    assert issubclass(revbench.ReversibilitySyntaxError, SyntaxError)
