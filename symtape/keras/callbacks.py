"""Keras's callbacks for :meth:`Model.fit`, :meth:`~Model.evaluate` and
:meth:`~Model.predict`: ``History`` (what ``fit`` returns), ``EarlyStopping``,
``ModelCheckpoint``, ``LambdaCallback``, and ``ProgbarLogger`` (the progress bar that
``verbose=1`` shows; one line per epoch with ``verbose=2``).

>>> import symtape as st
>>> st.random.set_seed(1)
>>> x = np.linspace(-1, 1, 64)[:, None]; y = 3 * x
>>> model = st.keras.Sequential([st.keras.layers.Dense(1)])
>>> model.compile(optimizer=st.keras.optimizers.SGD(0.5), loss="mse")
>>> stop = st.keras.callbacks.EarlyStopping(monitor="loss", min_delta=1e-3, patience=1)
>>> history = model.fit(x, y, epochs=100, verbose=0, callbacks=[stop])
>>> len(history.epoch) < 100, stop.stopped_epoch == history.epoch[-1]
(True, True)
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from symtape.base.errors import InvalidArgumentError

__all__ = ["Callback", "CallbackList", "History", "EarlyStopping", "ModelCheckpoint",
           "LambdaCallback", "ProgbarLogger", "Progbar"]

#: The hooks a callback may define, as Keras names them.
HOOKS = ("on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
         "on_train_batch_begin", "on_train_batch_end", "on_test_begin", "on_test_end",
         "on_test_batch_begin", "on_test_batch_end", "on_predict_begin", "on_predict_end",
         "on_predict_batch_begin", "on_predict_batch_end")


class Callback:
    """The base class: every hook does nothing; ``self.model`` and ``self.params`` (epochs,
    steps, verbose) are set before training starts.

    >>> import symtape as st
    >>> class Count(st.keras.callbacks.Callback):
    ...     def on_train_batch_end(self, batch, logs=None):
    ...         self.n = getattr(self, "n", 0) + 1
    >>> c = Count(); c.on_train_batch_end(0); c.n
    1
    """

    model = None
    params: dict = {}

    def set_model(self, model) -> None:
        self.model = model

    def set_params(self, params: dict) -> None:
        self.params = dict(params)


def _no_hook(self, *args, **kwargs) -> None:
    return None


for _name in HOOKS:
    setattr(Callback, _name, _no_hook)


class CallbackList:
    """The callbacks of one ``fit``/``evaluate``/``predict`` call, called in order.

    >>> calls = CallbackList([LambdaCallback(on_epoch_end=lambda e, logs: print(e, logs))])
    >>> calls.on_epoch_end(0, {"loss": 1.0})
    0 {'loss': 1.0}
    """

    def __init__(self, callbacks=(), model=None, **params) -> None:
        if callbacks is None:
            callbacks = ()
        if isinstance(callbacks, Callback) or not hasattr(callbacks, "__iter__"):
            raise InvalidArgumentError(f"callbacks must be a list of st.keras.callbacks."
                                       f"Callback, got {type(callbacks).__name__}")
        self.callbacks = list(callbacks)
        for i, c in enumerate(self.callbacks):
            if not isinstance(c, Callback):
                raise InvalidArgumentError(f"callbacks[{i}] is a {type(c).__name__}, not an "
                                           "st.keras.callbacks.Callback")
            if model is not None:
                c.set_model(model)
            c.set_params(params)

    def __getattr__(self, hook: str):
        if hook not in HOOKS:
            raise AttributeError(hook)

        def call(*args) -> None:
            for c in self.callbacks:
                getattr(c, hook)(*args)
        return call


class History(Callback):
    """What :meth:`Model.fit` returns: ``history[name]`` is the value of the loss or metric
    ``name`` at the end of each epoch (``val_`` names: on the validation data), ``epoch``
    the epochs run.

    >>> h = History(); h.on_train_begin(); h.on_epoch_end(0, {"loss": 0.5}); h.history
    {'loss': [0.5]}
    """

    def __init__(self) -> None:
        self.history: dict = {}
        self.epoch: list = []

    def on_train_begin(self, logs=None) -> None:
        self.epoch = []  # a model fitted again starts a new record (Keras's History)
        self.history = {}

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)

    def __repr__(self) -> str:
        return f"<History {len(self.epoch)} epochs: {sorted(self.history)}>"


def _mode(mode: str, monitor: str, what: str) -> str:
    if mode not in ("auto", "min", "max"):
        raise InvalidArgumentError(f"{what}: mode must be 'auto', 'min' or 'max', got "
                                   f"{mode!r}")
    if mode != "auto":
        return mode
    # Keras: accuracy-like metrics improve upwards, everything else (losses) downwards
    name = monitor.removeprefix("val_")
    return "max" if name.startswith(("acc", "accuracy", "auc")) or "accuracy" in name \
        else "min"


class _Monitor(Callback):
    """A callback that watches one logged value (``monitor``) for improvements."""

    def __init__(self, monitor: str, mode: str, min_delta: float, what: str) -> None:
        if not isinstance(monitor, str):
            raise InvalidArgumentError(f"{what}: monitor must be a metric name, got "
                                       f"{monitor!r}")
        self.monitor = monitor
        self.mode = _mode(mode, monitor, what)
        self.min_delta = abs(float(min_delta))
        self.what = what
        self.best = math.inf if self.mode == "min" else -math.inf

    def improved(self, value: float, reference: float) -> bool:
        if self.mode == "min":
            return value < reference - self.min_delta
        return value > reference + self.min_delta

    def current(self, logs) -> float | None:
        value = (logs or {}).get(self.monitor)
        if value is None:
            known = ", ".join(sorted(logs or {})) or "none"
            print(f"{self.what}: {self.monitor!r} is not among the logged values ({known}); "
                  "skipping", file=sys.stderr)
        return value


class EarlyStopping(_Monitor):
    """Stops training when ``monitor`` has not improved by more than ``min_delta`` for
    ``patience`` epochs (Keras's arguments; ``restore_best_weights`` puts back the weights
    of the best epoch; ``baseline``: improvement must beat it; ``start_from_epoch``: epochs
    of warm-up not watched). ``stopped_epoch`` is the epoch it stopped at (0: it did not).

    >>> EarlyStopping(patience=2).monitor
    'val_loss'
    """

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0.0, patience: int = 0,
                 verbose: int = 0, mode: str = "auto", baseline: float | None = None,
                 restore_best_weights: bool = False, start_from_epoch: int = 0) -> None:
        super().__init__(monitor, mode, min_delta, "st.keras.callbacks.EarlyStopping")
        if isinstance(patience, bool) or not isinstance(patience, (int, np.integer)) or \
                patience < 0:
            raise InvalidArgumentError(f"{self.what}: patience must be a non-negative int, got "
                                       f"{patience!r}")
        self.patience = int(patience)
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = bool(restore_best_weights)
        self.start_from_epoch = int(start_from_epoch)

    def on_train_begin(self, logs=None) -> None:
        self.wait = 0
        self.stopped_epoch = 0
        self.best = math.inf if self.mode == "min" else -math.inf
        self.best_weights = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch, logs=None) -> None:
        value = self.current(logs)
        if value is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()  # the first epoch watched
        self.wait += 1
        if self.improved(value, self.best):
            self.best, self.best_epoch = value, epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self.improved(value, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None) -> None:
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping", file=sys.stdout)


class ModelCheckpoint(_Monitor):
    """Saves the model's weights (:meth:`Model.save_weights`) at the end of each epoch to
    ``filepath``, which may name the epoch and logged values (``"w-{epoch:02d}-
    {val_loss:.2f}.weights.npz"``); ``save_best_only``: only when ``monitor`` improved.
    Whole-model files are :mod:`symtape.saved_model`'s, so ``save_weights_only`` must be
    True (Keras's default, False, saves a ``.keras`` archive symtape does not write).

    >>> ModelCheckpoint("w.weights.npz", save_weights_only=True).save_best_only
    False
    """

    def __init__(self, filepath, monitor: str = "val_loss", verbose: int = 0,
                 save_best_only: bool = False, save_weights_only: bool = False,
                 mode: str = "auto", save_freq="epoch", initial_value_threshold=None) -> None:
        super().__init__(monitor, mode, 0.0, "st.keras.callbacks.ModelCheckpoint")
        if not save_weights_only:
            raise InvalidArgumentError(f"{self.what}: symtape saves weights (give "
                                       "save_weights_only=True); whole models are saved "
                                       "with st.saved_model")
        if save_freq != "epoch":
            raise InvalidArgumentError(f"{self.what}: save_freq must be 'epoch', got "
                                       f"{save_freq!r}")
        self.filepath = str(filepath)
        self.verbose = verbose
        self.save_best_only = bool(save_best_only)
        if initial_value_threshold is not None:
            self.best = float(initial_value_threshold)

    def on_epoch_end(self, epoch, logs=None) -> None:
        logs = logs or {}
        try:
            path = self.filepath.format(epoch=epoch + 1, **logs)
        except (KeyError, IndexError, ValueError) as exc:
            raise InvalidArgumentError(f"{self.what}: filepath {self.filepath!r} names "
                                       f"{exc}, which is not among the logged values "
                                       f"({', '.join(sorted(logs))})") from None
        if self.save_best_only:
            value = self.current(logs)
            if value is None or not self.improved(value, self.best):
                return
            self.best = value
        self.model.save_weights(path)
        if self.verbose > 0:
            print(f"Epoch {epoch + 1}: saving model weights to {path}", file=sys.stdout)


class LambdaCallback(Callback):
    """A callback made of functions: ``on_epoch_begin(epoch, logs)``,
    ``on_epoch_end(epoch, logs)``, ``on_batch_begin(batch, logs)``,
    ``on_batch_end(batch, logs)`` (training batches), ``on_train_begin(logs)``,
    ``on_train_end(logs)``.

    >>> LambdaCallback(on_train_end=lambda logs: print("done")).on_train_end({})
    done
    """

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_batch_begin=None,
                 on_batch_end=None, on_train_begin=None, on_train_end=None,
                 **kwargs) -> None:
        given = dict(on_epoch_begin=on_epoch_begin, on_epoch_end=on_epoch_end,
                     on_train_batch_begin=on_batch_begin, on_train_batch_end=on_batch_end,
                     on_train_begin=on_train_begin, on_train_end=on_train_end, **kwargs)
        for hook, fn in given.items():
            if hook not in HOOKS:
                raise TypeError(f"st.keras.callbacks.LambdaCallback: unknown hook {hook!r}")
            if fn is not None:
                if not callable(fn):
                    raise InvalidArgumentError(f"st.keras.callbacks.LambdaCallback: {hook} "
                                               "must be callable")
                setattr(self, hook, fn)


class Progbar:
    """Keras's progress bar: ``update(step, values)`` redraws ``step/target [====>...] -
    ETA - name: value`` in place on a terminal; elsewhere (a file, a pipe, a notebook log)
    only the finished bar is written, once.

    >>> bar = Progbar(4, stream=sys.stdout)
    >>> for step in range(1, 5):
    ...     bar.update(step, {"loss": 1.0 / step})  # doctest: +ELLIPSIS
    4/4 [==============================] - ...s - loss: 0.2500
    """

    WIDTH = 30

    def __init__(self, target: int, stream=None, interactive: bool | None = None) -> None:
        self.target = int(target)
        self.stream = sys.stdout if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.interactive = bool(isatty and isatty()) if interactive is None else interactive
        self.start = time.perf_counter()
        self.shown = 0.0

    def line(self, step: int, values: dict) -> str:
        done = min(step, self.target) / self.target if self.target else 1.0
        filled = int(self.WIDTH * done)
        arrow = ">" if filled < self.WIDTH else ""
        bar = "=" * filled + arrow + "." * (self.WIDTH - filled - len(arrow))
        width = len(str(self.target))
        elapsed = time.perf_counter() - self.start
        if step < self.target and step > 0:
            timing = f"ETA: {elapsed / step * (self.target - step):.0f}s"
        else:
            timing = f"{elapsed:.0f}s"
        parts = [f"{step:>{width}}/{self.target} [{bar}]", timing]
        parts += [f"{k}: {v:.4f}" for k, v in values.items()]
        return " - ".join(parts)

    def update(self, step: int, values: dict) -> None:
        now = time.perf_counter()
        final = step >= self.target
        if self.interactive:
            if final or now - self.shown >= 0.05:  # at most 20 redraws a second
                self.stream.write("\r" + self.line(step, values) + ("\n" if final else ""))
                self.stream.flush()
                self.shown = now
        elif final:
            self.stream.write(self.line(step, values) + "\n")
            self.stream.flush()


class ProgbarLogger(Callback):
    """Progress of ``fit``/``evaluate``/``predict`` on stdout: with ``verbose=1`` an
    ``Epoch i/n`` line and a progress bar of the batches (running mean loss and metrics);
    with ``verbose=2`` one line per epoch.

    >>> ProgbarLogger().verbose
    1
    """

    def __init__(self, verbose: int = 1, stream=None) -> None:
        self.verbose = verbose
        self.stream = stream
        self.bar = None

    def _out(self):
        return sys.stdout if self.stream is None else self.stream

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self.epoch_start = time.perf_counter()
        epochs = self.params.get("epochs")
        if self.verbose == 1:
            self._out().write(f"Epoch {epoch + 1}/{epochs}\n")
            self.bar = Progbar(self.params.get("steps") or 0, self._out())

    def on_train_batch_end(self, batch, logs=None) -> None:
        if self.bar is not None:
            self.bar.update(batch + 1, logs or {})

    def on_epoch_end(self, epoch, logs=None) -> None:
        if self.verbose == 2:
            values = " - ".join(f"{k}: {v:.4f}" for k, v in (logs or {}).items())
            took = time.perf_counter() - self.epoch_start
            self._out().write(f"Epoch {epoch + 1}/{self.params.get('epochs')} - {took:.1f}s - "
                              f"{values}\n")
        elif self.verbose == 1 and logs and any(k.startswith("val_") for k in logs):
            values = " - ".join(f"{k}: {v:.4f}" for k, v in logs.items())
            self._out().write(f"  {values}\n")
        self.bar = None

    def on_test_begin(self, logs=None) -> None:
        if self.verbose == 1 and "epochs" not in self.params:
            self.bar = Progbar(self.params.get("steps") or 0, self._out())

    def on_test_batch_end(self, batch, logs=None) -> None:
        if self.bar is not None and "epochs" not in self.params:
            self.bar.update(batch + 1, logs or {})

    def on_predict_begin(self, logs=None) -> None:
        if self.verbose == 1:
            self.bar = Progbar(self.params.get("steps") or 0, self._out())

    def on_predict_batch_end(self, batch, logs=None) -> None:
        if self.bar is not None:
            self.bar.update(batch + 1, {})
