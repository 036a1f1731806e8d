"""The custom-training tutorial's Keras Sequential CNN (convolutions, ReLU,
BatchNormalization, max pooling, Dense, Dropout, softmax) trained by its GradientTape
step, compiled with st.function, with a line per epoch, then measured by Keras's
compile/evaluate as the tutorial ends.

By default it is scaled down to run in seconds: 16x16 images of four generated classes
(bars of different orientation and place), fewer filters. ``--full`` runs the tutorial as
written: its model (16-32-64 filters, Dense 256) on MNIST's 60,000 28x28 images (from
TensorFlow's cache, ~/.keras/datasets/mnist.npz; a generated stand-in when it is missing),
batch 64, 25 epochs (``--epochs``), with progress within each epoch.

    python -m symtape examples train_cnn [--full] [--epochs N]
"""

import argparse
import sys
import time

import numpy as np

import symtape as st
from symtape.keras.layers import (Activation, BatchNormalization, Conv2D, Dense, Dropout,
                                  Flatten, MaxPooling2D)
from symtape.keras.losses import categorical_crossentropy
from symtape.keras.models import Sequential
from symtape.keras.optimizers import Adam
from symtape.keras.utils import to_categorical


#: the tutorial's filters per CONV => RELU => BN set, and its Dense width; and scaled down
FULL = ((16,), (32, 32), (64, 64, 64)), 256
SMALL = ((8,), (16, 16)), 32


def build_model(width, height, depth, classes, layout=SMALL):
    """The tutorial's model: sets of (CONV => RELU => BN) * k => POOL, then FC => RELU =>
    BN => DROPOUT and a softmax classifier (``layout``: the filters of each set and the FC
    width)."""
    inputShape = (height, width, depth)
    chanDim = -1
    sets, dense = layout
    layers = []
    for filters in sets:
        for f in filters:
            extra = {"input_shape": inputShape} if not layers else {}
            layers += [Conv2D(f, (3, 3), padding="same", **extra), Activation("relu"),
                       BatchNormalization(axis=chanDim)]
        layers.append(MaxPooling2D(pool_size=(2, 2)))
    return Sequential(layers + [
        Flatten(),
        Dense(dense),
        Activation("relu"),
        BatchNormalization(),
        Dropout(0.5),
        Dense(classes),
        Activation("softmax"),
    ])


def small_data():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 512)
    images = rng.random((512, 16, 16)) * 0.3
    for k, c in enumerate(labels):
        at = 3 + 3 * (c // 2)
        if c % 2:
            images[k, :, at:at + 2] += 0.7  # a vertical bar
        else:
            images[k, at:at + 2, :] += 0.7  # a horizontal bar
    x = np.expand_dims(images, axis=-1)
    return (x[:384], labels[:384]), (x[384:], labels[384:])


def mnist():
    try:
        (trainX, trainY), (testX, testY) = st.keras.datasets.mnist.load_data()
    except FileNotFoundError as e:
        print(f"[INFO] {e}; using generated 28x28 digits instead")
        rng = np.random.default_rng(0)
        strokes = rng.random((10, 28, 28)) < 0.15  # one stroke pattern per class
        y = rng.integers(0, 10, 70000)
        x = (strokes[y] * 200 + rng.integers(0, 55, (70000, 28, 28))).astype(np.uint8)
        (trainX, trainY), (testX, testY) = (x[:60000], y[:60000]), (x[60000:], y[60000:])
    trainX = np.expand_dims(trainX, axis=-1).astype("float64") / 255.0
    testX = np.expand_dims(testX, axis=-1).astype("float64") / 255.0
    return (trainX, trainY), (testX, testY)


args = argparse.ArgumentParser()
args.add_argument("--full", action="store_true", help="the tutorial's model on MNIST")
args.add_argument("--epochs", type=int, default=None)
args = args.parse_args()

if args.full:
    print("[INFO] loading MNIST dataset...")
    (trainX, labels), (testX, testLabels) = mnist()
    classes, EPOCHS, BS, INIT_LR = 10, args.epochs or 25, 64, 1e-3
    layout = FULL
else:
    (trainX, labels), (testX, testLabels) = small_data()
    classes, EPOCHS, BS, INIT_LR = 4, args.epochs or 4, 32, 1e-2
    layout = SMALL
trainY, testY = to_categorical(labels, classes), to_categorical(testLabels, classes)

print("[INFO] creating model...")
st.random.set_seed(1)
height, width = trainX.shape[1:3]
model = build_model(width, height, 1, classes, layout)
opt = Adam(lr=INIT_LR, decay=INIT_LR / EPOCHS)


@st.function
def step(X, y):
    with st.GradientTape() as tape:
        pred = model(X)
        loss = categorical_crossentropy(y, pred)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return st.reduce_mean(loss)


numUpdates = int(trainX.shape[0] / BS)
history = []
for epoch in range(0, EPOCHS):
    print(f"[INFO] starting epoch {epoch + 1}/{EPOCHS}...", end="")
    sys.stdout.flush()
    epochStart = time.time()
    losses = []
    for i in range(numUpdates):
        losses.append(float(step(trainX[i * BS:(i + 1) * BS], trainY[i * BS:(i + 1) * BS])))
        if args.full and (i + 1) % 100 == 0:  # progress within a long epoch
            print(f" {i + 1}/{numUpdates}", end="")
            sys.stdout.flush()
    history.append(np.mean(losses))
    print(f" loss {history[-1]:.4f}, took {time.time() - epochStart:.2f} s")

model.compile(optimizer=opt, loss=categorical_crossentropy, metrics=["acc"])
(loss, acc) = model.evaluate(testX, testY, verbose=0)
print(f"[INFO] test loss {loss:.4f}, test accuracy: {acc:.4f}")
assert history[-1] < 0.5 * history[0] and acc > 0.9
