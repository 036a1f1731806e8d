"""``Sequential``: layers applied in order; ``Model`` is its base (a ``Layer``), with
Keras's ``compile``/``fit``/``evaluate``/``predict``."""

from __future__ import annotations

import inspect
import sys
import time

import numpy as np

from symtape import GradientTape, Tensor, TensorSpec, function, random
from symtape import math as M
from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.keras import losses, metrics, optimizers
from symtape.keras.layers import Layer
from symtape.keras.metrics import get as _metric  # (compile's argument metrics hides the module)

__all__ = ["Model", "Sequential", "History"]


class History:
    """What :meth:`Model.fit` returns: ``history[name]`` is the value of the loss or metric
    ``name`` at the end of each epoch (``val_`` names: on the validation data)."""

    def __init__(self) -> None:
        self.history: dict = {}
        self.epoch: list = []

    def __repr__(self) -> str:
        return f"<History {len(self.epoch)} epochs: {sorted(self.history)}>"


class _Compiled:
    """A model's training set-up (kept out of the layer walk: not a layer's weights)."""

    def __init__(self, loss, metric_list: list, eager: bool) -> None:
        self.loss = loss
        self.metrics = metric_list
        self.eager = eager
        self.steps: dict = {}  # (dtype, trailing shape) -> compiled step / prediction


class Model(Layer):
    """A layer made of layers (subclass it and write ``call``, as with Keras). After
    :meth:`compile` it trains with :meth:`fit` and is measured with :meth:`evaluate`.

    >>> import symtape as st
    >>> st.random.set_seed(1)
    >>> x = np.random.default_rng(0).normal(size=(64, 2)); y = x @ [[2.0], [-1.0]]
    >>> model = st.keras.Sequential([st.keras.layers.Dense(1)])
    >>> model.compile(optimizer=st.keras.optimizers.SGD(0.1), loss="mse", metrics=["mse"])
    >>> history = model.fit(x, y, batch_size=16, epochs=20, verbose=0)
    >>> history.history["loss"][-1] < 1e-3 < history.history["loss"][0]
    True
    >>> loss, mse = model.evaluate(x, y, verbose=0)
    >>> loss == mse < 1e-3
    True
    """

    _compiled = None
    optimizer = None

    def compile(self, optimizer="rmsprop", loss=None, metrics=None,  # noqa: A003
                run_eagerly: bool = False, **kwargs) -> None:
        """Sets the optimizer (an object or ``"sgd"``/``"adam"``/``"rmsprop"``), the loss
        (a function ``(y_true, y_pred) -> values per example``, a loss object or its name)
        and the metrics (names such as ``"acc"``, metric objects or functions) that
        :meth:`fit` and :meth:`evaluate` use. The training step is compiled with
        ``st.function`` (once for every batch size; with a ``Dropout``, whose masks are
        random draws at each call, once per batch size) unless ``run_eagerly``."""
        if loss is None:
            raise InvalidArgumentError(f"{self.name}.compile: give a loss")
        unknown = set(kwargs) - {"loss_weights", "weighted_metrics", "steps_per_execution"}
        if unknown:
            raise TypeError(f"{self.name}.compile: unknown arguments {sorted(unknown)}")
        self.optimizer = optimizers.get(optimizer)
        loss_fn = losses.get(loss)
        found = [_metric(m, loss_fn) for m in (metrics or ())]
        self._compiled = _Compiled(loss_fn, found, bool(run_eagerly))

    @property
    def metrics_names(self) -> list:
        """``["loss", ...]``: the names of :meth:`evaluate`'s values."""
        return ["loss"] + [m.name for m in self._setup("metrics_names").metrics]

    def _setup(self, what: str) -> _Compiled:
        if self._compiled is None:
            raise InvalidArgumentError(f"{self.name}.{what}: call compile(optimizer, loss, "
                                       "metrics) first")
        return self._compiled

    def _batch_loss(self, y, pred):
        return M.reduce_mean(self._compiled.loss(y, pred))

    def _step(self, kind: str, *data: np.ndarray):
        """The compiled (one trace for every batch size) training step or prediction for
        examples like ``data``; eager functions when the model runs eagerly."""
        setup = self._compiled
        key = (kind,) + tuple((a.dtype.str, a.shape[1:]) for a in data)
        if key in setup.steps:
            return setup.steps[key]

        def predict(xb):
            return self(xb, training=False)

        def train(xb, yb):
            with GradientTape() as tape:
                pred = self(xb, training=True)
                loss = self._batch_loss(yb, pred)
            weights = self.trainable_variables
            grads = tape.gradient(loss, weights)
            self.optimizer.apply_gradients(zip(grads, weights))
            return loss, pred

        fn = predict if kind == "predict" else train
        if not (setup.eager and kind == "train"):
            fn = function(fn, input_signature=[
                TensorSpec((None,) + a.shape[1:], self.dtype if a.dtype.kind == "f" else
                           a.dtype) for a in data])
        setup.steps[key] = fn
        return fn

    def predict(self, x, batch_size: int = 32, verbose=0) -> np.ndarray:
        """The model's outputs (``training=False``) for the examples ``x``, batch by batch.

        >>> import symtape as st
        >>> model = st.keras.Sequential([st.keras.layers.Dense(2, input_shape=(3,))])
        >>> model.predict(np.ones((5, 3))).shape
        (5, 2)
        """
        x = self._examples(x, "predict", "x")
        step = self._step("predict", x) if self._compiled is not None else (
            lambda xb: self(xb, training=False))
        batch = self._batch_size(batch_size, "predict")
        outs = [np.asarray(step(x[i:i + batch])) for i in range(0, len(x), batch)]
        return np.concatenate(outs) if outs else np.zeros((0,))

    def evaluate(self, x, y, batch_size: int = 32, verbose=1, return_dict: bool = False):
        """The loss (mean over the examples) and the metrics of :meth:`compile` on ``(x,
        y)``: ``loss`` alone when there are no metrics, else ``[loss, metric...]`` (a dict by
        name with ``return_dict``). ``verbose``: print them."""
        setup = self._setup("evaluate")
        x = self._examples(x, "evaluate", "x")
        y = self._examples(y, "evaluate", "y", len(x))
        batch = self._batch_size(batch_size, "evaluate")
        self._check_labels(x, y, "evaluate")
        step = self._step("predict", x)
        mean_loss = metrics.Mean("loss")
        for m in setup.metrics:
            m.reset_state()
        for i in range(0, len(x), batch):
            pred = step(x[i:i + batch])
            yb = y[i:i + batch]
            mean_loss.update_state(self._batch_loss(yb, pred), sample_weight=len(yb))
            for m in setup.metrics:
                m.update_state(yb, pred)
        values = {"loss": float(mean_loss.result())}
        values.update({m.name: float(m.result()) for m in setup.metrics})
        if verbose:
            print(f"{len(x)} examples - " + _line(values), file=sys.stdout)
        if return_dict:
            return values
        return values["loss"] if not setup.metrics else list(values.values())

    def fit(self, x, y, batch_size: int = 32, epochs: int = 1, verbose=1,
            validation_data=None, shuffle: bool = True, initial_epoch: int = 0) -> History:
        """Trains on ``(x, y)``: ``epochs`` passes over the examples in batches (the last one
        shorter), shuffled each epoch (from ``st.random``'s stream) unless ``shuffle=False``;
        each step is one ``GradientTape`` step of the compiled loss and optimizer
        (``training=True``). ``verbose``: a line per epoch with the mean loss and metrics
        over it (and on ``validation_data``, ``(x_val, y_val)``, with ``val_`` names). The
        labels of a classification loss are all checked before the first step (see
        :mod:`symtape.keras.losses`)."""
        setup = self._setup("fit")
        epochs = self._count(epochs, "fit", "epochs")
        initial_epoch = self._count(initial_epoch, "fit", "initial_epoch")
        x = self._examples(x, "fit", "x")
        y = self._examples(y, "fit", "y", len(x))
        batch = self._batch_size(batch_size, "fit")
        if len(x) == 0:
            raise ShapeError(f"{self.name}.fit: x has no examples")
        self._check_labels(x, y, "fit")
        step = self._step("train", x, y)
        history = History()
        mean_loss = metrics.Mean("loss")
        for epoch in range(initial_epoch, epochs):
            start = time.perf_counter()
            order = np.argsort(random.uniform((len(x),)).numpy(), kind="stable") \
                if shuffle else np.arange(len(x))
            mean_loss.reset_state()
            for m in setup.metrics:
                m.reset_state()
            for i in range(0, len(x), batch):
                take = order[i:i + batch]
                xb, yb = x[take], y[take]
                loss, pred = step(xb, yb)
                mean_loss.update_state(loss, sample_weight=len(take))
                for m in setup.metrics:
                    m.update_state(yb, pred)
            values = {"loss": float(mean_loss.result())}
            values.update({m.name: float(m.result()) for m in setup.metrics})
            if validation_data is not None:
                got = self.evaluate(*validation_data, batch_size=batch, verbose=0,
                                    return_dict=True)
                values.update({f"val_{k}": v for k, v in got.items()})
            for k, v in values.items():
                history.history.setdefault(k, []).append(v)
            history.epoch.append(epoch)
            if verbose:
                print(f"Epoch {epoch + 1}/{epochs} - {time.perf_counter() - start:.1f}s - "
                      + _line(values), file=sys.stdout, flush=True)
        return history

    def _check_labels(self, x: np.ndarray, y: np.ndarray, what: str) -> None:
        """Every label checked against the model's output before any step: inside the
        compiled step the labels are inputs whose values no trace sees (one example's
        eager output gives the number of classes)."""
        loss = self._compiled.loss
        if not losses.takes_labels(loss) or len(x) == 0:
            return
        out = self(x[:1], training=False)
        if isinstance(out, Tensor):
            losses.check_labels(loss, y, (len(y),) + tuple(out.shape[1:]),
                                f"{self.name}.{what}: y")

    def _examples(self, data, what: str, name: str, n: int | None = None) -> np.ndarray:
        arr = np.asarray(data.numpy() if hasattr(data, "numpy") else data)
        if arr.dtype.kind not in "fiub":
            raise InvalidArgumentError(f"{self.name}.{what}: {name} must hold numbers, got "
                                       f"dtype {arr.dtype}")
        if arr.ndim == 0:
            raise ShapeError(f"{self.name}.{what}: {name} must have examples along its first "
                             "axis, got a scalar")
        if n is not None and len(arr) != n:
            raise ShapeError(f"{self.name}.{what}: {name} has {len(arr)} examples, x has {n}")
        if arr.dtype.kind == "f" and arr.dtype != self.dtype and name == "x":
            arr = arr.astype(self.dtype)
        return arr

    def _count(self, value, what: str, name: str, least: int = 0) -> int:
        """``value`` as an int of at least ``least`` (0 or 1): a float (even ``2.0``) or a
        bool is a TypeError, as ``range`` in Keras's loop makes it, not a silent truncation."""
        kind = "a positive" if least == 1 else "a non-negative"
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{self.name}.{what}: {name} must be {kind} int, got "
                            f"{type(value).__name__} {value!r}")
        if value < least:
            raise InvalidArgumentError(f"{self.name}.{what}: {name} must be {kind} int, got "
                                       f"{value!r}")
        return int(value)

    def _batch_size(self, batch_size, what: str) -> int:
        return self._count(batch_size, what, "batch_size", least=1)

    def summary(self, print_fn=print) -> None:
        """Prints each sublayer with its output's weights count."""
        print_fn(f"Model: {self.name}")
        for layer in self._flatten(recursive=False, predicate=lambda v: isinstance(v, Layer)):
            print_fn(f"  {layer.name:<24} {type(layer).__name__:<20} {layer.count_params():>8}")
        print_fn(f"Total params: {self.count_params()}")


def _line(values: dict) -> str:
    return " - ".join(f"{k}: {v:.4f}" for k, v in values.items())


class Sequential(Model):
    """Layers applied one after the other; built on the first call, or at construction
    when the first layer has ``input_shape``. ``training`` reaches the layers that take it
    (BatchNormalization, Dropout).

    >>> import symtape as st
    >>> st.random.set_seed(0)
    >>> model = st.keras.Sequential([st.keras.layers.Dense(4, input_shape=(3,)),
    ...                              st.keras.layers.Activation("tanh")])
    >>> model.built, [v.shape for v in model.trainable_variables]
    (True, [(3, 4), (4,)])
    """

    def __init__(self, layers=None, name: str | None = None, **kwargs) -> None:
        super().__init__(name=name, **kwargs)
        self.layers: list = []
        for layer in layers or ():
            self.add(layer)

    def add(self, layer: Layer) -> None:
        """Appends ``layer`` (built at once when it is the first and has ``input_shape``)."""
        if not isinstance(layer, Layer):
            raise InvalidArgumentError(f"st.keras.Sequential: {layer!r} is not a layer")
        self.layers.append(layer)
        self.built = False
        first = self.layers[0]
        if first.input_shape is not None:
            self(np.zeros((1,) + first.input_shape), training=False)  # builds every layer

    def call(self, inputs, training=None):
        x = inputs
        for layer in self.layers:
            takes = "training" in inspect.signature(layer.call).parameters
            x = layer(x, training=training) if takes else layer(x)
        return x
