"""``Sequential``: layers applied in order; ``Model`` is its base (a ``Layer``), with
Keras's ``compile``/``fit``/``evaluate``/``predict``."""

from __future__ import annotations

import inspect
import sys

import numpy as np

from symtape import GradientTape, Tensor, TensorSpec, function, random
from symtape import math as M
from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.keras import callbacks as cbks
from symtape.keras import losses, metrics, optimizers, weights as weight_files
from symtape.keras.callbacks import History
from symtape.keras.layers import Layer
from symtape.keras.metrics import get as _metric  # (compile's argument metrics hides the module)

__all__ = ["Model", "Sequential", "History"]


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
    #: Set by a callback (``EarlyStopping``) to end :meth:`fit` after the current epoch.
    stop_training = False
    history = None

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

    def predict(self, x, batch_size: int = 32, verbose="auto", callbacks=None) -> np.ndarray:
        """The model's outputs (``training=False``) for the examples ``x``, batch by batch
        (``verbose=1``: a progress bar; ``"auto"`` is 1 as in Keras).

        >>> import symtape as st
        >>> model = st.keras.Sequential([st.keras.layers.Dense(2, input_shape=(3,))])
        >>> model.predict(np.ones((5, 3)), verbose=0).shape
        (5, 2)
        """
        x = self._examples(x, "predict", "x")
        step = self._step("predict", x) if self._compiled is not None else (
            lambda xb: self(xb, training=False))
        batch = self._batch_size(batch_size, "predict")
        steps = -(-len(x) // batch)
        calls = self._callbacks(callbacks, verbose, "predict", steps=steps)
        calls.on_predict_begin({})
        outs = []
        for k, i in enumerate(range(0, len(x), batch)):
            calls.on_predict_batch_begin(k, {})
            outs.append(np.asarray(step(x[i:i + batch])))
            calls.on_predict_batch_end(k, {"outputs": outs[-1]})
        calls.on_predict_end({})
        return np.concatenate(outs) if outs else np.zeros((0,))

    def _callbacks(self, callbacks, verbose, what: str, history=None, **params):
        """The :class:`~symtape.keras.callbacks.CallbackList` of a call: ``callbacks``, then
        the progress bar (unless ``verbose=0``), then ``history``."""
        if verbose == "auto":
            verbose = 1
        if isinstance(verbose, bool) or verbose not in (0, 1, 2):
            raise InvalidArgumentError(f"{self.name}.{what}: verbose must be 0, 1, 2 or "
                                       f"'auto', got {verbose!r}")
        given = list(callbacks) if isinstance(callbacks, (list, tuple)) else callbacks
        listed = cbks.CallbackList(given, self, verbose=verbose, **params).callbacks
        if verbose:
            listed.append(cbks.ProgbarLogger(verbose))
        if history is not None:
            listed.append(history)
        return cbks.CallbackList(listed, self, verbose=verbose, **params)

    def evaluate(self, x, y, batch_size: int = 32, verbose="auto", return_dict: bool = False,
                 callbacks=None):
        """The loss (mean over the examples) and the metrics of :meth:`compile` on ``(x,
        y)``: ``loss`` alone when there are no metrics, else ``[loss, metric...]`` (a dict by
        name with ``return_dict``). ``verbose``: 1 (or ``"auto"``) a progress bar with the
        running values, 2 one line at the end, 0 nothing."""
        setup = self._setup("evaluate")
        x = self._examples(x, "evaluate", "x")
        y = self._examples(y, "evaluate", "y", len(x))
        batch = self._batch_size(batch_size, "evaluate")
        self._check_labels(x, y, "evaluate")
        calls = self._callbacks(callbacks, verbose, "evaluate", steps=-(-len(x) // batch))
        values = self._test_loop(x, y, batch, calls)
        if verbose == 2:
            print(f"{len(x)} examples - " + _line(values), file=sys.stdout)
        if return_dict:
            return values
        return values["loss"] if not setup.metrics else list(values.values())

    def _test_loop(self, x: np.ndarray, y: np.ndarray, batch: int, calls) -> dict:
        """The mean loss and the metrics over ``(x, y)``, batch by batch, with the test
        hooks of ``calls``."""
        setup = self._compiled
        step = self._step("predict", x)
        mean_loss = metrics.Mean("loss")
        for m in setup.metrics:
            m.reset_state()
        calls.on_test_begin({})
        for k, i in enumerate(range(0, len(x), batch)):
            calls.on_test_batch_begin(k, {})
            pred = step(x[i:i + batch])
            yb = y[i:i + batch]
            mean_loss.update_state(self._batch_loss(yb, pred), sample_weight=len(yb))
            for m in setup.metrics:
                m.update_state(yb, pred)
            calls.on_test_batch_end(k, self._logs(mean_loss))
        values = self._logs(mean_loss)
        calls.on_test_end(values)
        return values

    def _logs(self, mean_loss) -> dict:
        values = {"loss": float(mean_loss.result())}
        values.update({m.name: float(m.result()) for m in self._compiled.metrics})
        return values

    def fit(self, x, y, batch_size: int = 32, epochs: int = 1, verbose="auto", callbacks=None,
            validation_split: float = 0.0, validation_data=None, shuffle: bool = True,
            initial_epoch: int = 0) -> History:
        """Trains on ``(x, y)``: ``epochs`` passes over the examples in batches (the last one
        shorter), shuffled each epoch (from ``st.random``'s stream) unless ``shuffle=False``;
        each step is one ``GradientTape`` step of the compiled loss and optimizer
        (``training=True``). ``verbose``: 1 (or ``"auto"``) an ``Epoch i/n`` line and a
        progress bar of the batches with the running mean loss and metrics, 2 one line per
        epoch, 0 nothing. Validation: ``validation_data=(x_val, y_val)``, or
        ``validation_split``, the fraction of the examples taken from the end (before
        shuffling, as Keras) and not trained on; its values are logged with ``val_`` names.
        ``callbacks``: Keras callbacks (:mod:`symtape.keras.callbacks`), called at each
        epoch's and batch's begin and end; one that sets ``model.stop_training`` ends
        training after the epoch. Returns the :class:`History` (also ``model.history``).
        The labels of a classification loss are all checked before the first step (see
        :mod:`symtape.keras.losses`)."""
        setup = self._setup("fit")
        epochs = self._count(epochs, "fit", "epochs")
        initial_epoch = self._count(initial_epoch, "fit", "initial_epoch")
        x = self._examples(x, "fit", "x")
        y = self._examples(y, "fit", "y", len(x))
        batch = self._batch_size(batch_size, "fit")
        x, y, validation_data = self._split(x, y, validation_split, validation_data)
        if len(x) == 0:
            raise ShapeError(f"{self.name}.fit: x has no examples")
        self._check_labels(x, y, "fit")
        if validation_data is not None:
            validation_data = self._validation(validation_data)
        step = self._step("train", x, y)
        history = History()
        self.history = history
        steps = -(-len(x) // batch)
        calls = self._callbacks(callbacks, verbose, "fit", history, epochs=epochs, steps=steps)
        mean_loss = metrics.Mean("loss")
        self.stop_training = False
        calls.on_train_begin({})
        logs: dict = {}
        for epoch in range(initial_epoch, epochs):
            calls.on_epoch_begin(epoch, {})
            order = np.argsort(random.uniform((len(x),)).numpy(), kind="stable") \
                if shuffle else np.arange(len(x))
            mean_loss.reset_state()
            for m in setup.metrics:
                m.reset_state()
            for k, i in enumerate(range(0, len(x), batch)):
                calls.on_train_batch_begin(k, {})
                take = order[i:i + batch]
                xb, yb = x[take], y[take]
                loss, pred = step(xb, yb)
                mean_loss.update_state(loss, sample_weight=len(take))
                for m in setup.metrics:
                    m.update_state(yb, pred)
                calls.on_train_batch_end(k, self._logs(mean_loss))
            logs = self._logs(mean_loss)
            if validation_data is not None:
                got = self._test_loop(*validation_data, batch, cbks.CallbackList())
                logs.update({f"val_{k}": v for k, v in got.items()})
            calls.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        calls.on_train_end(logs)
        return history

    def _split(self, x, y, validation_split, validation_data) -> tuple:
        """``(x, y, validation_data)`` after taking ``validation_split`` of the examples
        from the end (Keras: ``validation_data``, when given, wins)."""
        if isinstance(validation_split, bool) or not isinstance(
                validation_split, (int, float, np.floating, np.integer)) or \
                not 0.0 <= float(validation_split) < 1.0:
            raise InvalidArgumentError(f"{self.name}.fit: validation_split must be a number "
                                       f"in [0, 1), got {validation_split!r}")
        if not validation_split or validation_data is not None:
            return x, y, validation_data
        keep = int(len(x) * (1.0 - float(validation_split)))
        if keep == len(x):
            raise ShapeError(f"{self.name}.fit: validation_split={validation_split} of "
                             f"{len(x)} examples leaves none for validation")
        return x[:keep], y[:keep], (x[keep:], y[keep:])

    def _validation(self, data) -> tuple:
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise InvalidArgumentError(f"{self.name}.fit: validation_data must be a pair "
                                       "(x_val, y_val)")
        xv = self._examples(data[0], "fit", "validation_data[0]")
        yv = self._examples(data[1], "fit", "validation_data[1]", len(xv))
        self._check_labels(xv, yv, "fit")
        return xv, yv

    # -- weights -----------------------------------------------------------------------------
    def get_weights(self) -> list:
        """The values of the model's weights (all its variables, in order), as arrays.

        >>> import symtape as st
        >>> model = st.keras.Sequential([st.keras.layers.Dense(1, input_shape=(2,))])
        >>> [w.shape for w in model.get_weights()]
        [(2, 1), (1,)]
        """
        return [np.array(v.numpy(), copy=True) for v in self.variables]

    def set_weights(self, weights) -> None:
        """Assigns ``weights`` (arrays in :meth:`get_weights`' order and shapes).

        >>> import symtape as st
        >>> model = st.keras.Sequential([st.keras.layers.Dense(1, input_shape=(2,))])
        >>> model.set_weights([np.ones((2, 1)), np.zeros(1)])
        >>> model.predict(np.array([[1.0, 2.0]]), verbose=0)
        array([[3.]])
        """
        variables = self.variables
        weights = list(weights)
        if len(weights) != len(variables):
            raise InvalidArgumentError(f"{self.name}.set_weights: {len(weights)} arrays for "
                                       f"{len(variables)} weights")
        arrays = []
        for k, (v, w) in enumerate(zip(variables, weights)):
            w = np.asarray(w)
            if w.shape != tuple(v.shape):
                raise ShapeError(f"{self.name}.set_weights: weights[{k}] ({v.name}) has shape "
                                 f"{w.shape}, the weight {tuple(v.shape)}")
            arrays.append(w)
        for v, w in zip(variables, arrays):
            v.assign(w.astype(v.dtype))

    def save_weights(self, filepath) -> None:
        """Writes the weights to ``filepath`` (an uncompressed ``.npz`` archive, see
        :mod:`symtape.keras.weights`)."""
        weight_files.save(filepath, [(v.name or f"w{k}", v.numpy())
                                     for k, v in enumerate(self.variables)])

    def load_weights(self, filepath) -> None:
        """Reads weights written by :meth:`save_weights` (the same architecture: names,
        shapes and dtypes are checked before any weight changes).

        >>> import os, tempfile, symtape as st
        >>> model = st.keras.Sequential([st.keras.layers.Dense(1, input_shape=(2,))])
        >>> path = os.path.join(tempfile.mkdtemp(), "m.weights.npz")
        >>> model.save_weights(path); before = model.get_weights()
        >>> model.set_weights([np.zeros((2, 1)), np.zeros(1)]); model.load_weights(path)
        >>> all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
        True
        """
        variables = self.variables
        arrays = weight_files.load(filepath, [(v.name or f"w{k}", tuple(v.shape), v.dtype)
                                              for k, v in enumerate(variables)])
        for v, a in zip(variables, arrays):
            v.assign(a)

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
