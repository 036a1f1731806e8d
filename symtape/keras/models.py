"""``Sequential``: layers applied in order; ``Model`` is its base (a ``Layer``), with
Keras's ``compile``/``fit``/``evaluate``/``predict``."""

from __future__ import annotations

import inspect
import os
import sys

import numpy as np

from symtape import GradientTape, Tensor, TensorSpec, Variable, function, random
from symtape import optimizers as optimizers_base
from symtape import math as M
from symtape.base.errors import InvalidArgumentError, ShapeError, SymtapeError
from symtape.keras import callbacks as cbks
from symtape.keras import losses, metrics, optimizers, weights as weight_files
from symtape.keras.callbacks import History
from symtape.keras import layers as layers_module
from symtape.keras.layers import Layer
from symtape.keras.metrics import get as _metric  # (compile's argument metrics hides the module)

__all__ = ["Model", "Sequential", "History", "load_model"]

#: The format of the files :meth:`Model.save` writes.
FILE_FORMAT = "symtape.keras"
FILE_VERSION = 1
#: A loaded model is built on an example of its input shape: at most this many elements.
MAX_EXAMPLE_ELEMENTS = 1 << 26


class _Compiled:
    """A model's training set-up (kept out of the layer walk: not a layer's weights)."""

    def __init__(self, loss, metric_list: list, eager: bool) -> None:
        self.loss = loss
        self.metrics = metric_list
        self.eager = eager
        self.steps: dict = {}  # (dtype, trailing shape) -> compiled step / prediction

    def __getstate__(self) -> dict:
        # the compiled steps are closures over the model: traced again after unpickling
        return {**self.__dict__, "steps": {}}


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
    >>> bool(np.isclose(loss, mse, rtol=1e-5)) and mse < 1e-3  # float32 sums, in two orders
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
        self._compiled.given = (loss, list(metrics or ()))  # what a saved model names

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
        if callbacks is None:
            callbacks = ()
        # CallbackList's refusal of the container, made here before the progress bar and the
        # history join the list; CallbackList checks the callbacks one by one (the given ones
        # first, at their own indices) and sets each up once
        if isinstance(callbacks, cbks.Callback) or not hasattr(callbacks, "__iter__"):
            raise InvalidArgumentError(f"callbacks must be a list of st.keras.callbacks."
                                       f"Callback, got {type(callbacks).__name__}")
        listed = list(callbacks)
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
        array([[3.]], dtype=float32)
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

    # -- whole-model files -------------------------------------------------------------------
    def save(self, filepath, overwrite: bool = True) -> None:
        """Writes the model to ``filepath`` (Keras's ``.keras`` idea: one zip file): its
        architecture (a ``Sequential`` of ``st.keras.layers``, each as its
        :meth:`~symtape.keras.layers.Layer.get_config`), its weights, and, once compiled, the
        optimizer (class, arguments and state), the loss and the metrics by name -- names,
        numbers and arrays only. :func:`load_model` reads it back, running nothing from the
        file, and training goes on as if never interrupted. A subclassed ``Model`` has no
        architecture to write: save its weights (:meth:`save_weights`) or pickle it.

        >>> import os, tempfile, symtape as st
        >>> model = st.keras.Sequential([st.keras.Input(shape=(2,)), st.keras.layers.Dense(1)])
        >>> path = os.path.join(tempfile.mkdtemp(), "m.keras")
        >>> model.save(path)
        >>> st.keras.models.load_model(path).get_weights()[0].shape
        (2, 1)
        """
        if not overwrite and os.path.exists(filepath):
            raise InvalidArgumentError(f"{self.name}.save: {filepath!r} exists (overwrite=False)")
        if type(self) is not Sequential:
            raise InvalidArgumentError(
                f"{self.name}.save: a subclassed Model's architecture is its Python code; save "
                "its weights (save_weights) or pickle it, or build it as a Sequential")
        layers = []
        for k, layer in enumerate(self.layers):
            if _LAYER_CLASSES.get(type(layer).__name__) is not type(layer):
                raise InvalidArgumentError(
                    f"{self.name}.save: layer {k} ({layer.name}) is a {type(layer).__name__}, "
                    "a class of your own; a saved model holds st.keras.layers only (save "
                    "its weights or pickle the model)")
            layers.append({"class": type(layer).__name__, "config": layer.get_config()})
        shape = getattr(self, "build_input_shape", None)
        config = {"format": FILE_FORMAT, "version": FILE_VERSION, "class": "Sequential",
                  "name": self.name, "layers": layers,
                  "build_input_shape": None if shape is None else list(shape),
                  "compile": None}
        variables = list(self.variables)
        groups = {"weights": [(v.name, v.numpy()) for v in variables]}
        if self._compiled is not None:
            config["compile"], state = _compile_config(self, variables)
            groups.update(state)
        weight_files.save_archive(filepath, config, groups)

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


_LAYER_CLASSES = {name: getattr(layers_module, name) for name in layers_module.__all__
                  if isinstance(getattr(layers_module, name), type)
                  and getattr(layers_module, name) is not Layer}
_OPTIMIZER_CLASSES = {"SGD": optimizers.SGD, "Adam": optimizers.Adam,
                      "RMSprop": optimizers.RMSprop}


def _optimizer_config(opt) -> dict:
    """The arguments that make ``opt`` again: each ``__init__`` parameter along its class
    chain that it holds as an attribute of plain data."""
    out = {}
    for cls in type(opt).__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        for name in inspect.signature(init).parameters:
            value = getattr(opt, name, None)
            if name not in out and isinstance(value, (bool, int, float, str)):
                out[name] = value
    return out


def _compile_config(model, variables: list) -> tuple:
    """``(compile config, {group: arrays})``: the optimizer's class, arguments and state
    (its per-variable slots by the index of the variable, its own variables), the loss and
    the metrics by name."""
    opt = model.optimizer
    kind = type(opt).__name__
    if _OPTIMIZER_CLASSES.get(kind) is not type(opt):
        raise InvalidArgumentError(f"{model.name}.save: the optimizer is a {kind}; a saved "
                                   "model holds st.keras.optimizers (SGD, Adam, RMSprop)")
    loss, metric_list = model._compiled.given
    loss_name = losses.serialize(loss)
    if loss_name is None:
        raise InvalidArgumentError(f"{model.name}.save: the loss {loss!r} is a function of "
                                   "your own; a saved model names its loss (loss='mse', ...)")
    names = []
    for m in metric_list:
        if not isinstance(m, str):
            raise InvalidArgumentError(f"{model.name}.save: metric {m!r} is not a name; a "
                                       "saved model names its metrics (metrics=['acc'])")
        names.append(m)
    index = {v._id: k for k, v in enumerate(variables)}
    slots, groups = {}, {}
    for attr, table in vars(opt).items():
        if isinstance(table, optimizers_base.Slots) and table:
            owned = [(index[v._id], s) for v, s in table.values() if v._id in index]
            slots[attr] = [k for k, _ in owned]
            groups[f"optimizer/{attr}"] = [(variables[k].name, s.numpy()) for k, s in owned]
    own = {attr: float(v.numpy()) for attr, v in vars(opt).items()
           if isinstance(v, Variable) and v.shape == ()}
    config = {"optimizer": {"class": kind, "config": _optimizer_config(opt), "slots": slots,
                            "variables": own},
              "loss": loss_name, "metrics": names, "run_eagerly": model._compiled.eager}
    return config, groups


def load_model(filepath, compile: bool = True):  # noqa: A002 - Keras's name
    """The model :meth:`Model.save` wrote to ``filepath``: layers made from their names and
    arguments (``st.keras.layers`` only), weights and, with ``compile``, the optimizer and
    its state, loss and metrics. Nothing in the file is run (no pickles, no code); every
    name, number and array is checked, and anything else is an ``InvalidArgumentError``
    naming the file and the fault.

    >>> load_model("/nonexistent.keras")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    symtape.base.errors.InvalidArgumentError: load_model: cannot read '/nonexistent.keras': ...
    """
    archive = weight_files.Archive(filepath)
    what = f"load_model: {archive.name}"
    cfg = archive.config
    if cfg.get("format") != FILE_FORMAT or cfg.get("version") != FILE_VERSION:
        raise InvalidArgumentError(f"{what} is not a symtape Keras model of version "
                                   f"{FILE_VERSION} (format {str(cfg.get('format'))[:40]!r}, "
                                   f"version {str(cfg.get('version'))[:10]})")
    if cfg.get("class") != "Sequential" or not isinstance(cfg.get("layers"), list):
        raise InvalidArgumentError(f"{what}: the model must be a Sequential with a list of "
                                   "layers")
    made = [_layer_from(entry, k, what) for k, entry in enumerate(cfg["layers"])]
    name = cfg.get("name")
    model = Sequential(made, name=name if isinstance(name, str) else None)
    shape = cfg.get("build_input_shape")
    if shape is not None:
        example = _example_shape(shape, what)
        if not model.built:
            model(np.zeros(example), training=False)
    variables = list(model.variables)
    values = archive.arrays("weights", [(v.name, v.shape, v.dtype) for v in variables])
    for v, a in zip(variables, values):
        v.assign(a)
    if compile and cfg.get("compile") is not None:
        _compile_from(model, cfg["compile"], archive, variables, what)
    return model


def _layer_from(entry, k: int, what: str):
    if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
        raise InvalidArgumentError(f"{what}: layer {k} is not {{'class': ..., 'config': ...}}")
    cls = _LAYER_CLASSES.get(entry.get("class"))
    if cls is None:
        raise InvalidArgumentError(f"{what}: layer {k} has class "
                                   f"{str(entry.get('class'))[:40]!r}, not one of "
                                   f"st.keras.layers ({', '.join(sorted(_LAYER_CLASSES))})")
    config = entry["config"]
    _plain(config, f"{what}: layer {k}")
    try:
        return cls(**config)
    except (TypeError, ValueError, SymtapeError) as exc:
        raise InvalidArgumentError(f"{what}: layer {k} ({cls.__name__}) cannot be made from "
                                   f"its config: {str(exc)[:200]}") from None


def _plain(value, where: str, depth: int = 0) -> None:
    """Raises unless ``value`` is JSON data of names, numbers, lists and dicts (depth 8)."""
    if depth > 8:
        raise InvalidArgumentError(f"{where}: nested too deeply")
    if isinstance(value, dict):
        for key, v in value.items():
            _plain(v, f"{where}: {str(key)[:40]}", depth + 1)
    elif isinstance(value, list):
        for v in value:
            _plain(v, where, depth + 1)
    elif not (value is None or isinstance(value, (bool, int, float, str))):
        raise InvalidArgumentError(f"{where}: {type(value).__name__} is not plain data")


def _example_shape(shape, what: str) -> tuple:
    if not isinstance(shape, list) or not shape or shape[0] is not None or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in shape[1:]):
        raise InvalidArgumentError(f"{what}: build_input_shape {str(shape)[:60]} is not "
                                   "[None, sizes...]")
    example = (1,) + tuple(shape[1:])
    if len(example) > 8 or int(np.prod(example, dtype=object)) > MAX_EXAMPLE_ELEMENTS:
        raise InvalidArgumentError(f"{what}: build_input_shape {shape[:9]} is too large")
    return example


def _compile_from(model, cfg, archive, variables: list, what: str) -> None:
    _plain(cfg, f"{what}: compile")
    opt_cfg = cfg.get("optimizer") if isinstance(cfg, dict) else None
    if not isinstance(opt_cfg, dict) or opt_cfg.get("class") not in _OPTIMIZER_CLASSES or \
            not isinstance(opt_cfg.get("config"), dict):
        raise InvalidArgumentError(f"{what}: the optimizer is not one of "
                                   f"{', '.join(_OPTIMIZER_CLASSES)} with its config")
    try:
        opt = _OPTIMIZER_CLASSES[opt_cfg["class"]](**opt_cfg["config"])
        model.compile(optimizer=opt, loss=cfg.get("loss"), metrics=cfg.get("metrics") or [],
                      run_eagerly=bool(cfg.get("run_eagerly", False)))
    except (TypeError, ValueError, SymtapeError) as exc:
        raise InvalidArgumentError(f"{what}: cannot compile the model as saved: "
                                   f"{str(exc)[:200]}") from None
    for attr, value in (opt_cfg.get("variables") or {}).items():
        target = getattr(opt, attr, None) if isinstance(attr, str) else None
        if not isinstance(target, Variable) or isinstance(value, bool) or \
                not isinstance(value, (int, float)):
            raise InvalidArgumentError(f"{what}: optimizer variable {str(attr)[:40]!r}")
        target.assign(float(value))
    for attr, indices in (opt_cfg.get("slots") or {}).items():
        table = getattr(opt, attr, None) if isinstance(attr, str) else None
        if not isinstance(table, optimizers_base.Slots) or not isinstance(indices, list) or any(
                isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(variables)
                for k in indices):
            raise InvalidArgumentError(f"{what}: optimizer slots {str(attr)[:40]!r}")
        owners = [variables[k] for k in indices]
        values = archive.arrays(f"optimizer/{attr}", [(v.name, v.shape, v.dtype)
                                                      for v in owners])
        for v, a in zip(owners, values):
            optimizers_base.slot(table, v).assign(a)
