"""MiniRocket, MultiRocket, Hydra and MultiRocket-Hydra in bounded memory: aeon's classifiers, step for step,
without their copies.

aeon's ``MiniRocketClassifier``, ``MultiRocketClassifier``, ``HydraClassifier`` and ``MultiRocketHydraClassifier``
are pipelines: transformers (random convolutional kernels), scalers and scikit-learn's ``RidgeClassifierCV(alphas=logspace(-3, 3, 10))``.
The pipeline transforms every series at once and the ridge classifier copies the float32 features to float64 and
centres that copy, about 20 bytes a feature a series beyond the features themselves: MultiRocket keeps 49,728
features a series, so ElectricDevices (8,926 training series) took 19 GB.

:class:`RocketClassifier` runs the same steps with the same settings and random state: aeon's own transformer,
fitted on the training series and applied a chunk of series at a time into one float32 feature matrix; the
classifier's scaling, in place; and :class:`FeatureRidgeClassifierCV`, the same leave-one-out (generalised
cross-validation) choice of alpha computed in float64 blocks of that matrix. Predictions transform, scale and
score a chunk at a time. The results equal aeon's up to float rounding (tests/test_rocket_classifiers.py); what
stays in memory is the float32 training features plus two n x n float64 matrices (n training series; p x p
where the features are fewer than the series) and blocks of ``block_bytes``.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

__all__ = ["ALPHAS", "ROCKET_NAMES", "ROCKET_PARTS", "FeatureRidgeClassifierCV", "RocketClassifier",
           "labels_of_scores", "save_rocket", "load_rocket"]

ALPHAS = np.logspace(-3, 3, 10)  # aeon's classifiers' ridge penalties
# each classifier's feature parts, concatenated in this order before one ridge classifier
ROCKET_PARTS = {"minirocket": ("minirocket",), "multirocket": ("multirocket",), "hydra": ("hydra",),
                "multirocket_hydra": ("hydra", "multirocket")}
ROCKET_NAMES = tuple(ROCKET_PARTS)
BLOCK_BYTES = 128 * 2**20  # float64 work blocks of the ridge fit
CHUNK_BYTES = 128 * 2**20  # one chunk of transformed series (and Hydra's convolution outputs)


def _blocks(total: int, size: int) -> Iterator[slice]:
    size = max(1, int(size))
    for start in range(0, total, size):
        yield slice(start, min(start + size, total))


def labels_of_scores(classes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The labels ridge scores pick, as scikit-learn's ridge classifiers pick them: (n,) scores for two classes
    (positive: ``classes[1]``), else the column of the largest of (n, K)."""
    return classes[(scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)]


def _column_stats(x: np.ndarray, block_bytes: int, ddof: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Column means and variances of a float32 matrix, in float64 column blocks (the two-pass algorithm with
    scikit-learn's correction term)."""
    n, p = x.shape
    mean, var = np.empty(p), np.empty(p)
    for s in _blocks(p, block_bytes // (8 * max(n, 1))):
        block = x[:, s].astype(np.float64)
        mean[s] = block.sum(axis=0) / n
        block -= mean[s]
        correction = block.sum(axis=0)
        np.square(block, out=block)
        var[s] = (block.sum(axis=0) - correction**2 / n) / (n - ddof)
    return mean, var


class FeatureRidgeClassifierCV:
    """scikit-learn's ``RidgeClassifierCV(alphas)`` (default ``cv=None``: leave-one-out errors by generalised
    cross-validation) on a float32 feature matrix, without copying it.

    The labels are coded -1 / +1 (one column for two classes), features and codes are centred, and for every alpha
    the leave-one-out errors of the ridge regression come from one eigendecomposition: of the n x n Gram matrix
    when there are no more series than features, of the p x p covariance matrix otherwise (scikit-learn's
    ``gcv_mode="auto"``). The alpha with the smallest mean squared leave-one-out error (the first on ties) gives
    ``coef_`` and ``intercept_``, stored in float32 as scikit-learn stores them for float32 input. Everything is
    computed in float64 blocks of ``block_bytes``; the centred float64 features are never held whole.

    Parameters
    ----------
    alphas : sequence of float, default=np.logspace(-3, 3, 10)
        Ridge penalties to choose from.
    block_bytes : int, default=128 MiB
        Size of one float64 work block.

    Attributes
    ----------
    classes_ : ndarray
        The class labels.
    alpha_ : float
        The chosen penalty.
    best_score_ : float
        Its negative mean squared leave-one-out error.
    coef_ : ndarray of shape (n_features,) for two classes, else (n_classes, n_features), float32
    intercept_ : ndarray of shape (1,) or (n_classes,), float32

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(40, 100)).astype(np.float32)
    >>> y = np.where(x[:, 0] > 0, "up", "down")
    >>> clf = FeatureRidgeClassifierCV().fit(x, y)
    >>> bool((clf.predict(x) == y).mean() > 0.9)
    True
    """

    def __init__(self, alphas: Any = ALPHAS, block_bytes: int = BLOCK_BYTES):
        self.alphas = alphas
        self.block_bytes = block_bytes

    def fit(self, x: np.ndarray, y: Any) -> "FeatureRidgeClassifierCV":
        from sklearn.preprocessing import LabelBinarizer

        x = self._check(x)
        n, p = x.shape
        if n < 2:
            raise ValueError(f"expected at least 2 series to fit, got {n}")
        binarizer = LabelBinarizer(pos_label=1, neg_label=-1)
        codes = binarizer.fit_transform(np.asarray(y)).astype(np.float64)
        if binarizer.y_type_ not in ("binary", "multiclass"):
            raise ValueError(f"expected one label per series (binary or multiclass), got {binarizer.y_type_} labels")
        if len(codes) != n:
            raise ValueError(f"expected {n} labels (one per row of x), got {len(codes)}")
        self.classes_ = binarizer.classes_
        alphas = np.atleast_1d(np.asarray(self.alphas, dtype=np.float64))
        mean, _ = _column_stats(x, self.block_bytes)
        code_mean = codes.mean(axis=0)
        # the centred codes and the intercept's column of ones (scikit-learn's square roots of unit sample weights)
        targets = np.column_stack([codes - code_mean, np.ones(n)])
        fit = self._fit_gram if n <= p else self._fit_covariance
        looe, coef_of = fit(x, mean, targets, alphas)
        scores = -np.mean(looe**2, axis=(0, 2))  # (alphas,)
        best = int(np.argmax(scores))  # the first best, as scikit-learn's loop keeps it
        coef = coef_of(best)  # (p, k) float64
        intercept = code_mean - mean @ coef
        self.alpha_, self.best_score_ = float(alphas[best]), float(scores[best])
        if coef.shape[1] == 1:
            self.coef_ = coef[:, 0].astype(np.float32)
        else:
            self.coef_ = np.ascontiguousarray(coef.T).astype(np.float32)
        self.intercept_ = intercept.astype(np.float32)
        return self

    def decision_function(self, x: np.ndarray) -> np.ndarray:
        """Scores as scikit-learn computes them (float32 features times float32 coefficients plus intercept)."""
        x = self._check(x)
        if x.shape[1] != self.coef_.shape[-1]:
            raise ValueError(f"expected {self.coef_.shape[-1]} features, got {x.shape[1]}")
        return x @ self.coef_.T + self.intercept_

    def predict(self, x: np.ndarray) -> np.ndarray:
        return labels_of_scores(self.classes_, self.decision_function(x))

    @staticmethod
    def _check(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim != 2:
            raise ValueError(f"expected a 2-D feature matrix (series, features), got shape {x.shape}")
        return x if x.dtype == np.float32 else x.astype(np.float32)

    def _centred(self, x: np.ndarray, mean: np.ndarray, rows: slice = slice(None), cols: slice = slice(None),
                 order: str = "C") -> np.ndarray:
        block = x[rows, cols].astype(np.float64, order=order)
        block -= mean[cols]
        return block

    def _fit_gram(self, x, mean, targets, alphas):
        """Leave-one-out errors from the eigendecomposition of the centred Gram matrix X X' (n <= p)."""
        from scipy.linalg import eigh
        from scipy.linalg.blas import dsyrk

        n, p = x.shape
        k = targets.shape[1] - 1
        gram = np.zeros((n, n), order="F")
        for cols in _blocks(p, self.block_bytes // (8 * n)):
            block = self._centred(x, mean, cols=cols, order="F")
            gram = dsyrk(1.0, block, beta=1.0, c=gram, trans=0, lower=0, overwrite_c=1)  # upper triangle
            del block
        eigvals, q = eigh(gram, lower=False, overwrite_a=True, check_finite=False)
        del gram
        inverse = 1.0 / (eigvals[:, None] + alphas[None, :])  # (n, alphas)
        qt_targets = q.T @ targets
        diag = np.empty((n, len(alphas)))
        for rows in _blocks(n, self.block_bytes // (8 * n)):
            diag[rows] = np.square(q[rows]) @ inverse  # diag(Q D Q') for every alpha
        mixed = (inverse[:, :, None] * qt_targets[:, None, :]).reshape(n, -1)
        g = (q @ mixed).reshape(n, len(alphas), k + 1)  # (X X' + alpha)^-1 targets
        del q
        dual = g[:, :, :k]
        d = diag - g[:, :, k] / n  # the intercept's share of the leave-one-out correction
        looe = dual / d[:, :, None]

        def coef_of(best: int) -> np.ndarray:
            coef = np.empty((p, k))
            for cols in _blocks(p, self.block_bytes // (8 * n)):
                coef[cols] = self._centred(x, mean, cols=cols).T @ dual[:, best]
            return coef

        return looe, coef_of

    def _fit_covariance(self, x, mean, targets, alphas):
        """Leave-one-out errors from the eigendecomposition of the centred covariance matrix X' X (p < n)."""
        from scipy.linalg import eigh
        from scipy.linalg.blas import dsyrk

        n, p = x.shape
        k = targets.shape[1] - 1
        cov = np.zeros((p, p), order="F")
        xt_targets = np.zeros((p, k + 1))
        for rows in _blocks(n, self.block_bytes // (8 * p)):
            block = self._centred(x, mean, rows=rows)
            cov = dsyrk(1.0, block.T, beta=1.0, c=cov, trans=0, lower=0, overwrite_c=1)  # += block' block
            xt_targets += block.T @ targets[rows]
            del block
        eigvals, v = eigh(cov, lower=False, overwrite_a=True, check_finite=False)
        del cov
        inverse = 1.0 / (eigvals[:, None] + alphas[None, :])  # (p, alphas)
        vt_xt_targets = v.T @ xt_targets
        mixed = (inverse[:, :, None] * vt_xt_targets[:, None, :]).reshape(p, -1)  # V' H^-1 X' targets per alpha
        diag = np.empty((n, len(alphas)))
        hat = np.empty((n, mixed.shape[1]))
        for rows in _blocks(n, self.block_bytes // (16 * p)):
            xv = self._centred(x, mean, rows=rows) @ v
            hat[rows] = xv @ mixed  # X H^-1 X' targets
            np.square(xv, out=xv)
            diag[rows] = xv @ inverse  # diag(X H^-1 X')
            del xv
        hat = hat.reshape(n, len(alphas), k + 1)
        residual = targets[:, None, :k] - hat[:, :, :k]
        d = 1.0 - diag - (1.0 - hat[:, :, k]) / n
        looe = residual / d[:, :, None]

        def coef_of(best: int) -> np.ndarray:
            return v @ (inverse[:, best, None] * vt_xt_targets[:, :k])

        return looe, coef_of


class RocketClassifier:
    """aeon's ``MiniRocketClassifier``, ``MultiRocketClassifier``, ``HydraClassifier`` or
    ``MultiRocketHydraClassifier`` (their default settings) with bounded memory: the same transformers, scaling and
    ridge classifier, a chunk of series at a time.

    ``multirocket_hydra`` concatenates Hydra's features (aeon's sparse scaling) and MultiRocket's (standard
    scaling) in one ridge classifier, as aeon's ``MultiRocketHydraClassifier`` does (Dempster et al. 2023); both
    transformers get the same ``random_state``. aeon centres MultiRocket's features there while its
    ``MultiRocketClassifier`` does not; the ridge fit centres every feature itself, so the two give the same
    classifier up to float rounding, and MultiRocket's part is scaled here as in ``MultiRocketClassifier``.

    Parameters
    ----------
    name : {"minirocket", "multirocket", "hydra", "multirocket_hydra"}
        Which of aeon's classifiers to reproduce.
    random_state : int or None, default=None
        Passed to aeon's transformers, as aeon's classifier passes it.
    n_jobs : int, default=1
        Threads of the transform and of the ridge fit's linear algebra.
    chunk_bytes : int, default=128 MiB
        About how much one chunk of series may take while it is transformed.
    block_bytes : int, default=128 MiB
        One float64 work block of the ridge fit.

    Attributes
    ----------
    classes_ : ndarray
    input_shape_ : (channels, steps) of the training series
    transformers_ : list of aeon transformers (fitted), in the order of :data:`ROCKET_PARTS`
    ridge_ : FeatureRidgeClassifierCV
    n_features_ : int
        Features per series (all parts).

    Examples
    --------
    >>> from aeon.datasets import load_unit_test
    >>> x_train, y_train = load_unit_test(split="train")
    >>> x_test, y_test = load_unit_test(split="test")
    >>> clf = RocketClassifier("minirocket", random_state=0).fit(x_train, y_train)
    >>> bool((clf.predict(x_test) == y_test).mean() > 0.8)
    True
    """

    def __init__(self, name: str = "minirocket", random_state: int | None = None, n_jobs: int = 1,
                 chunk_bytes: int = CHUNK_BYTES, block_bytes: int = BLOCK_BYTES):
        self.name = name
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.chunk_bytes = chunk_bytes
        self.block_bytes = block_bytes

    def _transformer(self, part: str):
        if part == "minirocket":
            from aeon.transformations.collection.convolution_based import MiniRocket

            return MiniRocket(n_kernels=10000, max_dilations_per_kernel=32, n_jobs=self.n_jobs,
                              random_state=self.random_state)
        if part == "multirocket":
            from aeon.transformations.collection.convolution_based import MultiRocket

            return MultiRocket(n_kernels=10000, max_dilations_per_kernel=32, n_features_per_kernel=4,
                               n_jobs=self.n_jobs, random_state=self.random_state)
        from aeon.transformations.collection.convolution_based import HydraTransformer

        return HydraTransformer(n_kernels=8, n_groups=64, n_jobs=self.n_jobs, random_state=self.random_state)

    @staticmethod
    def _series(x: Any) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim == 2:
            x = x[:, None, :]
        if x.ndim != 3:
            raise ValueError(f"expected series of shape (n_cases, n_channels, n_timepoints), got shape {x.shape}")
        return x

    @property
    def _parts(self) -> tuple[str, ...]:
        return ROCKET_PARTS[self.name]

    def _rows_per_chunk(self, n_timepoints: int) -> int:
        """Series per chunk: ``chunk_bytes`` over what one series takes while it is transformed (its float32
        features twice: aeon's output and its NaN-free copy; with Hydra also its convolution outputs, measured at
        about 4 KB a time step), at least ``n_jobs``."""
        row = 8 * self.n_features_
        if "hydra" in self._parts:
            row += 4096 * n_timepoints
        return max(int(self.n_jobs), 1, int(self.chunk_bytes // row))

    @staticmethod
    def _transform_chunk(transformer: Any, x: np.ndarray) -> np.ndarray:
        out = transformer.transform(x)
        out = out.numpy() if hasattr(out, "numpy") else np.asarray(out)
        return out.astype(np.float32, copy=False)

    def _features_of_chunk(self, x: np.ndarray, out: np.ndarray) -> None:
        """Every part's features of a chunk of series, into ``out`` (rows, n_features_)."""
        for transformer, cols in zip(self.transformers_, self.columns_):
            out[:, cols] = self._transform_chunk(transformer, x)

    def _features(self, x: np.ndarray) -> np.ndarray:
        """The transformers' float32 features of every series, a chunk at a time."""
        rows = self._rows_per_chunk(x.shape[-1])
        out = np.empty((len(x), self.n_features_), dtype=np.float32)
        for s in _blocks(len(x), rows):
            self._features_of_chunk(x[s], out[s])
        return out

    def _fit_scaling(self, features: np.ndarray) -> None:
        """Each part's scaler, fitted on its training features (a view of ``features``, scaled in place after).
        MiniRocket / MultiRocket: scikit-learn's ``StandardScaler(with_mean=False)`` (divide by the population
        standard deviation; near-constant features by 1). Hydra: aeon's sparse scaler (square root of the positive
        part, then centred and divided by the sample standard deviation plus a small term from the share of zeros,
        zeros kept at zero)."""
        self.shifts_, self.scales_ = [], []
        for part, cols in zip(self._parts, self.columns_):
            block = features[:, cols]
            if part == "hydra":
                np.sqrt(np.maximum(block, 0, out=block), out=block)
                mean, var = _column_stats(block, self.block_bytes, ddof=1)
                zeros = np.zeros(block.shape[1])
                for s in _blocks(len(block), self.block_bytes // (4 * block.shape[1])):
                    zeros += (block[s] == 0).sum(axis=0)
                eps = (zeros / len(block)).astype(np.float32) ** 4 + np.float32(1e-8)
                self.shifts_.append(mean.astype(np.float32))
                self.scales_.append(np.sqrt(var).astype(np.float32) + eps)
            else:
                mean, var = _column_stats(block, self.block_bytes)
                n = len(block)
                constant = var <= n * np.finfo(np.float64).eps * var + (n * mean * np.finfo(np.float64).eps) ** 2
                scale = np.sqrt(var)
                scale[constant] = 1.0
                self.shifts_.append(None)
                self.scales_.append(scale.astype(np.float32))

    def _scale(self, features: np.ndarray, fitted: bool = False) -> np.ndarray:
        """Scales ``features`` in place, part by part (``fitted``: Hydra's square root is already taken)."""
        for part, cols, shift, scale in zip(self._parts, self.columns_, self.shifts_, self.scales_):
            if part != "hydra":
                features[:, cols] /= scale
                continue
            if not fitted:
                block = features[:, cols]
                np.sqrt(np.maximum(block, 0, out=block), out=block)
            for s in _blocks(len(features), self.block_bytes // (4 * features.shape[1])):
                block = features[s, cols]
                nonzero = block != 0
                block -= shift
                block *= nonzero
                block /= scale
        return features

    def fit(self, x: Any, y: Any) -> "RocketClassifier":
        if self.name not in ROCKET_PARTS:
            raise ValueError(f"unknown classifier {self.name!r}; expected one of {', '.join(ROCKET_NAMES)}")
        x = self._series(x)
        y = np.asarray(y)
        if len(y) != len(x):
            raise ValueError(f"expected {len(x)} labels (one per series), got {len(y)}")
        from threadpoolctl import threadpool_limits

        self.input_shape_ = (int(x.shape[1]), int(x.shape[2]))  # (channels, steps) of the training series
        self.transformers_ = [self._transformer(part).fit(x) for part in self._parts]
        widths = [self._transform_chunk(t, x[:1]).shape[1] for t in self.transformers_]
        ends = np.cumsum([0, *widths])
        self.columns_ = [slice(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:])]
        self.n_features_ = int(ends[-1])
        features = self._features(x)
        self._fit_scaling(features)
        self._scale(features, fitted=True)
        with threadpool_limits(limits=max(1, int(self.n_jobs)), user_api="blas"):
            self.ridge_ = FeatureRidgeClassifierCV(block_bytes=self.block_bytes).fit(features, y)
        self.classes_ = self.ridge_.classes_
        return self

    def decision_function(self, x: Any) -> np.ndarray:
        """The ridge classifier's scores of series x: (n,) for two classes (positive: ``classes_[1]``), else
        (n, n_classes), as scikit-learn's ``RidgeClassifierCV.decision_function`` gives them."""
        x = self._series(x)
        rows = self._rows_per_chunk(x.shape[-1])
        out = []
        for s in _blocks(len(x), rows):
            chunk = np.empty((s.stop - s.start, self.n_features_), dtype=np.float32)
            self._features_of_chunk(x[s], chunk)
            out.append(self.ridge_.decision_function(self._scale(chunk)))
        if not out:
            return np.zeros((0,) if len(self.classes_) == 2 else (0, len(self.classes_)), dtype=np.float32)
        return np.concatenate(out)

    def predict(self, x: Any) -> np.ndarray:
        return labels_of_scores(self.classes_, self.decision_function(x))


# A fitted classifier on disk (save_rocket / load_rocket): one safetensors file, no pickle. Its arrays are the
# transformers' fitted arrays (their kernels, dilations, biases, by attribute name), each part's scaling and the
# ridge classifier's; its metadata (JSON) the settings, the training series' shape and the classes. Loading builds
# each transformer as fit() does, fits it on zeros of the recorded shape (which fixes every array's shape and all
# that is drawn at random), then puts the stored arrays back: a file from another aeon version whose transformers
# hold other arrays is refused, naming them.
ROCKET_FORMAT = 1


def _as_numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def _is_array(value: Any) -> bool:
    import torch

    return isinstance(value, (np.ndarray, torch.Tensor))


def _fitted_arrays(obj: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """The arrays an aeon transformer holds (and the torch module inside it, as Hydra's), by attribute name:
    arrays and tensors, and tuples / lists of them (``name.0``, ``name.1``, ...)."""
    from torch import nn

    out: dict[str, np.ndarray] = {}
    for key, value in vars(obj).items():
        if isinstance(value, nn.Module):
            out.update(_fitted_arrays(value, f"{prefix}{key}."))
        elif _is_array(value):
            out[prefix + key] = _as_numpy(value)
        elif isinstance(value, (tuple, list)) and value and all(_is_array(v) for v in value):
            out.update({f"{prefix}{key}.{i}": _as_numpy(v) for i, v in enumerate(value)})
    return out


def _put_arrays(obj: Any, arrays: dict[str, np.ndarray], prefix: str = "") -> None:
    """The inverse of :func:`_fitted_arrays` on a transformer fitted to the same shapes: every array replaced by
    the stored one, as the same type (NumPy array or torch tensor, tuple or list)."""
    import torch
    from torch import nn

    def like(old: Any, new: np.ndarray) -> Any:
        return torch.from_numpy(np.array(new)) if isinstance(old, torch.Tensor) else np.array(new)

    for key, value in vars(obj).items():
        if isinstance(value, nn.Module):
            _put_arrays(value, arrays, f"{prefix}{key}.")
        elif _is_array(value):
            setattr(obj, key, like(value, arrays[prefix + key]))
        elif isinstance(value, (tuple, list)) and value and all(_is_array(v) for v in value):
            items = [like(v, arrays[f"{prefix}{key}.{i}"]) for i, v in enumerate(value)]
            setattr(obj, key, type(value)(items))


def save_rocket(clf: RocketClassifier, path: str | Any) -> Any:
    """A fitted :class:`RocketClassifier` as one safetensors file (written atomically); :func:`load_rocket` reads
    it back. Returns the path."""
    import json
    from importlib.metadata import version
    from pathlib import Path

    from safetensors.numpy import save_file

    from ..encoders.io import atomic_write

    if not hasattr(clf, "ridge_"):
        raise ValueError("expected a fitted RocketClassifier (call fit first)")
    arrays: dict[str, np.ndarray] = {}
    for part, transformer in zip(clf._parts, clf.transformers_):
        arrays.update(_fitted_arrays(transformer, f"{part}."))
    for part, shift, scale in zip(clf._parts, clf.shifts_, clf.scales_):
        arrays[f"scaling.{part}.scale"] = scale
        if shift is not None:
            arrays[f"scaling.{part}.shift"] = shift
    arrays.update({"ridge.coef": clf.ridge_.coef_, "ridge.intercept": clf.ridge_.intercept_})
    meta = {"format": ROCKET_FORMAT, "name": clf.name, "random_state": clf.random_state,
            "input_shape": list(clf.input_shape_), "classes": [str(c) for c in clf.classes_],
            "columns": [[c.start, c.stop] for c in clf.columns_], "alpha": clf.ridge_.alpha_,
            "aeon": version("aeon")}
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    path = Path(path)
    atomic_write(path, lambda tmp: save_file(arrays, tmp, metadata={"rocket": json.dumps(meta)}))
    return path


def load_rocket(path: str | Any, n_jobs: int = 1) -> RocketClassifier:
    """The classifier :func:`save_rocket` wrote, ready to score series of its training shape. ValueError (naming
    the file) for a file that is not one, or whose transformers' arrays differ from this aeon version's."""
    import json
    from pathlib import Path

    from safetensors import safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="numpy") as fh:
            meta = json.loads((fh.metadata() or {})["rocket"])
            arrays = {k: fh.get_tensor(k) for k in fh.keys()}
    except Exception as err:  # missing, not safetensors, or no "rocket" metadata
        raise ValueError(f"{path}: expected a ROCKET classifier saved by jumbokit (save_rocket), could not read it "
                         f"({type(err).__name__}: {err})") from None
    if meta.get("format") != ROCKET_FORMAT or meta.get("name") not in ROCKET_PARTS:
        raise ValueError(f"{path}: expected format {ROCKET_FORMAT} of one of {', '.join(ROCKET_NAMES)}, got format "
                         f"{meta.get('format')!r} of {meta.get('name')!r}")
    clf = RocketClassifier(meta["name"], random_state=meta["random_state"], n_jobs=n_jobs)
    chans, steps = meta["input_shape"]
    clf.input_shape_ = (int(chans), int(steps))
    zeros = np.zeros((2, int(chans), int(steps)))
    clf.transformers_ = []
    for part in clf._parts:
        transformer = clf._transformer(part).fit(zeros)
        fitted = _fitted_arrays(transformer, f"{part}.")
        stored = {k: v for k, v in arrays.items() if k.startswith(f"{part}.")}
        differ = sorted(k for k in set(fitted) | set(stored)
                        if k not in fitted or k not in stored or fitted[k].shape != stored[k].shape)
        if differ:
            raise ValueError(f"{path} was saved with aeon {meta.get('aeon')}, whose {part} transformer holds other "
                             f"arrays than this version's: {', '.join(differ[:5])}")
        _put_arrays(transformer, stored, f"{part}.")
        clf.transformers_.append(transformer)
    clf.columns_ = [slice(int(a), int(b)) for a, b in meta["columns"]]
    clf.n_features_ = int(meta["columns"][-1][1])
    clf.scales_ = [arrays[f"scaling.{part}.scale"] for part in clf._parts]
    clf.shifts_ = [arrays.get(f"scaling.{part}.shift") for part in clf._parts]
    ridge = FeatureRidgeClassifierCV(block_bytes=clf.block_bytes)
    ridge.classes_ = np.asarray(meta["classes"])
    ridge.coef_, ridge.intercept_, ridge.alpha_ = arrays["ridge.coef"], arrays["ridge.intercept"], meta["alpha"]
    clf.ridge_, clf.classes_ = ridge, ridge.classes_
    return clf
