"""The custom-training tutorial's Keras Sequential CNN (convolutions, ReLU,
BatchNormalization, max pooling, Dense, Dropout, softmax) trained by its GradientTape
step, compiled with st.function, with a line per epoch. Scaled down to run in seconds:
16x16 images of four generated classes (bars of different orientation and place), fewer
filters; benchmarks/train.py times the full-size model.
"""

import time

import numpy as np

import symtape as st
from symtape.keras.layers import (Activation, BatchNormalization, Conv2D, Dense, Dropout,
                                  Flatten, MaxPooling2D)
from symtape.keras.losses import categorical_crossentropy
from symtape.keras.models import Sequential
from symtape.keras.optimizers import Adam
from symtape.keras.utils import to_categorical


def build_model(width, height, depth, classes):
    inputShape = (height, width, depth)
    chanDim = -1
    return Sequential([
        # CONV => RELU => BN => POOL layer set
        Conv2D(8, (3, 3), padding="same", input_shape=inputShape),
        Activation("relu"),
        BatchNormalization(axis=chanDim),
        MaxPooling2D(pool_size=(2, 2)),
        # (CONV => RELU => BN) * 2 => POOL layer set
        Conv2D(16, (3, 3), padding="same"),
        Activation("relu"),
        BatchNormalization(axis=chanDim),
        Conv2D(16, (3, 3), padding="same"),
        Activation("relu"),
        BatchNormalization(axis=chanDim),
        MaxPooling2D(pool_size=(2, 2)),
        # first (and only) set of FC => RELU layers
        Flatten(),
        Dense(32),
        Activation("relu"),
        BatchNormalization(),
        Dropout(0.5),
        # softmax classifier
        Dense(classes),
        Activation("softmax"),
    ])


rng = np.random.default_rng(0)
labels = rng.integers(0, 4, 512)
images = rng.random((512, 16, 16)) * 0.3
for k, c in enumerate(labels):
    at = 3 + 3 * (c // 2)
    if c % 2:
        images[k, :, at:at + 2] += 0.7  # a vertical bar
    else:
        images[k, at:at + 2, :] += 0.7  # a horizontal bar
trainX = np.expand_dims(images, axis=-1)
trainY = to_categorical(labels, 4)

st.random.set_seed(1)
model = build_model(16, 16, 1, 4)
EPOCHS, BS, INIT_LR = 4, 32, 1e-2
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
    epochStart = time.time()
    losses = [float(step(trainX[i * BS:(i + 1) * BS], trainY[i * BS:(i + 1) * BS]))
              for i in range(numUpdates)]
    history.append(np.mean(losses))
    print(f"[INFO] epoch {epoch + 1}/{EPOCHS}: loss {history[-1]:.4f}, took "
          f"{time.time() - epochStart:.2f} s")
accuracy = np.mean(np.argmax(model(trainX).numpy(), -1) == labels)
print(f"[INFO] training accuracy: {accuracy:.4f}")
assert history[-1] < 0.5 * history[0] and accuracy > 0.9
