"""``ht``: ADBench's hand tracking.  A skinned hand (bones in a tree, each vertex bound to
a few of them by weights) is posed by 26 parameters ``theta``: a global rotation
(angle-axis) and translation, and joint angles of the five fingers (Euler angles of the
bones 2 + 4 f ...).  Each bone's pose is its base pose times its rotation; poses chain down
the tree; a vertex moves by the blend of its bones' transforms (linear blend skinning);
then the global rotation and translation.  The residuals, three per point:

* simple (``us`` empty): ``points[i] - vertex[correspondences[i]]``;
* complicated: ``points[i]`` less the point ``u_0 a + u_1 b + (1 - u_0 - u_1) c`` of the
  triangle ``correspondences[i]`` with corners ``a, b, c``.

The Jacobian, three rows per point, has a column per ``theta`` (and, complicated, two
first: ``d r_i / d us_i``, the only ``us`` a point's residual depends on).  It is taken
in forward mode, a ``revbench.jvp`` per column: 26 (or 28) passes over the model for its
``3 n`` rows, where reverse mode would take a sweep per row.  The two ``us`` columns are
each one ``jvp`` along every point's ``u_0`` (``u_1``) at once, as no residual depends on
another point's ``us``: a compressed Jacobian, as ``ba``'s."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from revbench import ad
from revbench.function import reversible
from revbench.gradbench.evals.base import Eval, Steps, field, floats, program
from revbench.lang.markers import routine


@reversible
def euler_rotation(R, p):
    """``R +=`` the rotation ``Rz Ry Rx`` of the Euler angles ``x = p[0]``, ``z = p[1]``,
    ``y = p[2]``."""
    with routine as trig:
        cx = math.cos(p[0])
        sx = math.sin(p[0])
        cz = math.cos(p[1])
        sz = math.sin(p[1])
        cy = math.cos(p[2])
        sy = math.sin(p[2])
    R[0, 0] += cy * cz
    R[0, 1] += sx * sy * cz - cx * sz
    R[0, 2] += sx * sz + cx * sy * cz
    R[1, 0] += cy * sz
    R[1, 1] += cx * cz + sx * sy * sz
    R[1, 2] += cx * sy * sz - sx * cz
    R[2, 0] -= sy
    R[2, 1] += sx * cy
    R[2, 2] += cx * cy
    ~trig


@reversible
def angle_axis_rotation(R, a):
    """``R +=`` the rotation by the angle ``|a|`` about the axis ``a`` (the identity for
    ``|a| < 1e-4``)."""
    with routine as angle:
        n = math.sqrt(a[0] ** 2 + a[1] ** 2 + a[2] ** 2)
    if n < 0.0001:
        R[0, 0] += 1.0
        R[1, 1] += 1.0
        R[2, 2] += 1.0
    else:
        with routine as axis:
            x = a[0] / n
            y = a[1] / n
            z = a[2] / n
            s = math.sin(n)
            c = math.cos(n)
        R[0, 0] += x * x + (1.0 - x * x) * c
        R[0, 1] += x * y * (1.0 - c) - z * s
        R[0, 2] += x * z * (1.0 - c) + y * s
        R[1, 0] += x * y * (1.0 - c) + z * s
        R[1, 1] += y * y + (1.0 - y * y) * c
        R[1, 2] += y * z * (1.0 - c) - x * s
        R[2, 0] += x * z * (1.0 - c) - y * s
        R[2, 1] += z * y * (1.0 - c) + x * s
        R[2, 2] += z * z + (1.0 - z * z) * c
        ~axis
    ~angle


@reversible
def pose_parameters(P, theta):
    """``P +=`` the pose of every bone (row ``3 + b``: its Euler angles) and of the whole
    hand (rows 0-2: rotation, scale 1, translation) from the 26 ``theta``: for each finger,
    two angles of its first bone, one of the next two, none of its tip."""
    for k in range(3):
        P[0, k] += theta[k]
        P[1, k] += 1.0
        P[2, k] += theta[3 + k]
    for f in range(5):
        P[5 + 4 * f, 0] += theta[6 + 4 * f]
        P[5 + 4 * f, 1] += theta[7 + 4 * f]
        P[6 + 4 * f, 0] += theta[8 + 4 * f]
        P[7 + 4 * f, 0] += theta[9 + 4 * f]


@reversible
def skinned_vertices(V, theta, parents, base_relatives, inverse_base_absolutes,
                     base_positions, weights):
    """``V +=`` every vertex of the hand posed by ``theta`` (3 coordinates)."""
    nb = base_relatives.shape[0]
    nv = base_positions.shape[0]
    with routine as skinning:
        P = np.zeros((nb + 3, 3))
        pose_parameters(P, theta)
        relatives = np.zeros((nb, 4, 4))  # each bone's pose: base pose, then its rotation
        for b in range(nb):
            with routine as turn:
                R = np.zeros((4, 4))
                euler_rotation(R[0:3, 0:3], P[3 + b])
                R[3, 3] += 1.0
            relatives[b] += base_relatives[b] @ R
            ~turn
        absolutes = np.zeros((nb, 4, 4))  # chained down the tree (parents come first)
        for b in range(nb):
            if parents[b] == -1:
                absolutes[b] += relatives[b]
            else:
                absolutes[b] += absolutes[parents[b]] @ relatives[b]
        transforms = np.zeros((nb, 16))  # each bone's move from its base pose, flat
        for b in range(nb):
            with routine as move:
                T = np.zeros((4, 4))
                T += absolutes[b] @ inverse_base_absolutes[b]
            for r in range(4):
                transforms[b, 4 * r:4 * r + 4] += T[r]
            ~move
        blended = np.zeros((nv, 16))  # each vertex's blend of its bones' moves
        blended += weights @ transforms
        local = np.zeros((nv, 3))
        for v in range(nv):
            for r in range(3):
                local[v, r] += np.dot(blended[v, 4 * r:4 * r + 4], base_positions[v])
        G = np.zeros((3, 3))  # the global rotation, scaled
        angle_axis_rotation(G, P[0])
        G *= P[1, 0]
    V += local @ G.T
    V += P[2]
    ~skinning


@reversible
def residuals_simple(err, theta, parents, base_relatives, inverse_base_absolutes,
                     base_positions, weights, points, correspondences):
    with routine as posed:
        V = np.zeros((base_positions.shape[0], 3))
        skinned_vertices(V, theta, parents, base_relatives, inverse_base_absolutes,
                         base_positions, weights)
    for i in range(points.shape[0]):
        err[i] += points[i] - V[correspondences[i]]
    ~posed


@reversible
def residuals_complicated(err, us, theta, parents, base_relatives, inverse_base_absolutes,
                          base_positions, weights, triangles, points, correspondences):
    with routine as posed:
        V = np.zeros((base_positions.shape[0], 3))
        skinned_vertices(V, theta, parents, base_relatives, inverse_base_absolutes,
                         base_positions, weights)
    for i in range(points.shape[0]):
        t = correspondences[i]
        err[i] += points[i] - (us[i, 0] * V[triangles[t, 0]] + us[i, 1] * V[triangles[t, 1]]
                               + (1.0 - us[i, 0] - us[i, 1]) * V[triangles[t, 2]])
        del t
    ~posed


MODEL = ("parents", "base_relatives", "inverse_base_absolutes", "base_positions", "weights")


def _ints(value: Any, name: str, ndim: int) -> np.ndarray:
    a = floats(value, name, ndim)
    if not np.all(a == np.round(a)):
        raise ValueError(f"ht: `{name}` must be integers")
    return a.astype(np.int64)


def _args(raw: Any) -> dict:
    data = field(raw, "data")
    model = field(data, "model")
    theta = floats(field(raw, "theta"), "theta", 1)
    if theta.shape != (26,):
        raise ValueError(f"ht: `theta` must have 26 numbers, got {theta.size}")
    a = {"theta": theta,
         "parents": _ints(field(model, "parents"), "parents", 1),
         "base_relatives": floats(field(model, "base_relatives"), "base_relatives", 3),
         "inverse_base_absolutes": floats(field(model, "inverse_base_absolutes"),
                                          "inverse_base_absolutes", 3),
         "base_positions": floats(field(model, "base_positions"), "base_positions", 2),
         "weights": floats(field(model, "weights"), "weights", 2),
         "points": floats(field(data, "points"), "points", 2),
         "correspondences": _ints(field(data, "correspondences"), "correspondences", 1)}
    nb, nv, n = a["parents"].size, a["base_positions"].shape[0], a["points"].shape[0]
    if nb != 22:
        raise ValueError(f"ht: the model must have 22 bones (3 + 4 per finger + ...), got {nb}")
    for name, shape in (("base_relatives", (nb, 4, 4)), ("inverse_base_absolutes", (nb, 4, 4)),
                        ("base_positions", (nv, 4)), ("weights", (nv, nb)), ("points", (n, 3)),
                        ("correspondences", (n,))):
        if a[name].shape != shape:
            raise ValueError(f"ht: `{name}` must have the shape {shape}, got {a[name].shape}")
    if np.any(a["parents"] >= np.arange(nb)) or np.any(a["parents"] < -1):
        raise ValueError("ht: each bone's parent must come before it (or be -1)")
    us = np.array(field(raw, "us"), dtype=np.float64)
    a["complicated"] = us.size > 0
    if a["complicated"]:
        a["us"] = us.reshape(n, 2) if us.ndim == 1 and us.size == 2 * n else us
        if a["us"].shape != (n, 2):
            raise ValueError(f"ht: `us` must have two numbers per point, got {us.shape}")
        a["triangles"] = _ints(field(model, "triangles"), "triangles", 2)
        top, ntri = nv, a["triangles"].shape[0]
        if a["triangles"].shape[1:] != (3,) or np.any(a["triangles"] < 0) or np.any(
                a["triangles"] >= top):
            raise ValueError("ht: `triangles` must be three vertex indices each")
    else:
        ntri = nv
    if np.any(a["correspondences"] < 0) or np.any(a["correspondences"] >= ntri):
        raise ValueError("ht: `correspondences` must index the "
                         + ("triangles" if a["complicated"] else "vertices"))
    return a


class Ht(Eval):
    name = "ht"

    def steps(self) -> dict[str, Steps]:
        simple = program(residuals_simple.__wrapped__, self.check)
        complicated = program(residuals_complicated.__wrapped__, self.check)

        def call_args(a: dict) -> tuple:
            err = np.zeros((a["points"].shape[0], 3))
            model = tuple(a[k] for k in MODEL)
            if a["complicated"]:
                return complicated, (err, a["us"], a["theta"], *model, a["triangles"],
                                     a["points"], a["correspondences"])
            return simple, (err, a["theta"], *model, a["points"], a["correspondences"])

        def objective(a: dict) -> np.ndarray:
            f, args = call_args(a)
            return f(*args)[0]

        def jacobian(a: dict) -> np.ndarray:
            f, args = call_args(a)
            columns = []
            if a["complicated"]:  # d r_i / d us_i: one jvp per column of every point's us
                for j in range(2):
                    du = np.zeros_like(a["us"])
                    du[:, j] = 1.0
                    columns.append(ad.jvp(f, *args, tangents={"us": du},
                                          outputs="err")[1][0].ravel())
            for k in range(26):
                e = np.zeros(26)
                e[k] = 1.0
                columns.append(ad.jvp(f, *args, tangents={"theta": e},
                                      outputs="err")[1][0].ravel())
            return np.stack(columns, axis=1)

        return {"objective": (_args, objective, lambda r: r.ravel().tolist()),
                "jacobian": (_args, jacobian, lambda r: r.tolist())}

    def sample(self) -> Any:
        return _small_hand(complicated=True)

    def warm(self) -> None:
        """Both programs: a simple input and a complicated one."""
        for raw in (_small_hand(complicated=False), _small_hand(complicated=True)):
            for prepare, compute, output in self.functions.values():
                output(compute(prepare(raw)))


def _small_hand(complicated: bool) -> dict:
    """A hand of GradBench's layout to compile on: 22 bones (a root, a wrist, five fingers
    of four), six vertices, two points; the values do not matter."""
    parents = [-1, 0] + [p for f in range(5) for p in (1, 2 + 4 * f, 3 + 4 * f, 4 + 4 * f)]
    eye = np.eye(4).tolist()
    positions = [[0.1 * k, 0.2, 0.05 * k, 1.0] for k in range(6)]
    weights = [[1.0 if b == 2 + 3 * k else 0.0 for b in range(22)] for k in range(6)]
    model = {"bone_count": 22, "bone_names": [f"bone{b}" for b in range(22)],
             "parents": parents, "base_relatives": [eye] * 22,
             "inverse_base_absolutes": [eye] * 22, "base_positions": positions,
             "weights": weights, "triangles": [[0, 1, 2], [3, 4, 5]], "is_mirrored": False}
    return {"theta": [0.1] * 26, "us": [[0.2, 0.3], [0.5, 0.1]] if complicated else [],
            "data": {"model": model, "correspondences": [1, 0],
                     "points": [[0.1, 0.2, 0.3], [0.0, -0.1, 0.2]]}}
