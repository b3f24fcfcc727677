"""Writes the model files shipped in model/builtin/ (run from the repository root:
python3 model/builtin/make_models.py). Keras 3's model.to_json() format, so each
file loads in Keras as it is (keras.models.model_from_json) and trains here
with --model=model/builtin/NAME.json or --model=NAME."""

import json


def obj(module, cls, config, registered=None):
    return {"module": module, "class_name": cls, "config": config, "registered_name": registered}


def dtype():
    return obj("keras", "DTypePolicy", {"name": "float32"})


def init(cls, **cfg):
    cfg.setdefault("seed", None)
    return obj("keras.initializers", cls, cfg)


def layer(cls, name, **cfg):
    base = {"name": name, "trainable": True, "dtype": dtype()}
    base.update(cfg)
    return obj("keras.layers", cls, base)


def inp(shape):
    return obj("keras.layers", "InputLayer",
               {"batch_shape": [None] + shape, "dtype": "float32", "sparse": False,
                "name": "input_layer"})


def conv(name, filters, k, activation="relu", padding="valid", kernel_init="GlorotUniform"):
    return layer("Conv2D", name, filters=filters, kernel_size=[k, k], strides=[1, 1],
                 padding=padding, data_format="channels_last", dilation_rate=[1, 1], groups=1,
                 activation=activation, use_bias=True, kernel_initializer=init(kernel_init),
                 bias_initializer=init("Zeros"), kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None)


def pool(name, p):
    return layer("MaxPooling2D", name, pool_size=[p, p], padding="valid", strides=[p, p],
                 data_format="channels_last")


def dense(name, units, activation):
    return layer("Dense", name, units=units, activation=activation, use_bias=True,
                 kernel_initializer=init("GlorotUniform"), bias_initializer=init("Zeros"),
                 kernel_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 bias_constraint=None)


def bn(name):
    return layer("BatchNormalization", name, axis=-1, momentum=0.99, epsilon=0.001, center=True,
                 scale=True, beta_initializer=init("Zeros"), gamma_initializer=init("Ones"),
                 moving_mean_initializer=init("Zeros"),
                 moving_variance_initializer=init("Ones"), beta_regularizer=None,
                 gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                 synchronized=False)


def act(name, a):
    return layer("Activation", name, activation=a)


def dropout(name, rate):
    return layer("Dropout", name, rate=rate, seed=None, noise_shape=None)


def flatten():
    return layer("Flatten", "flatten", data_format="channels_last")


def sequential(name, layers):
    return obj("keras", "Sequential",
               {"name": name, "trainable": True, "dtype": dtype(), "layers": layers},
               None) | {"build_config": {"input_shape": layers[0]["config"]["batch_shape"]},
                        "compile_config": None}


MODELS = {
    # The built-in CNN: 121,930 parameters (ModelByName("cnn") in code).
    "cnn": sequential("cnn", [
        inp([28, 28, 1]), conv("conv1", 32, 3), pool("pool1", 2), conv("conv2", 64, 3),
        pool("pool2", 2), flatten(), dense("dense1", 64, "relu"), dense("dense2", 10, "linear")]),
    "mlp": sequential("mlp", [
        inp([28, 28, 1]), flatten(), dense("dense1", 32, "relu"), dense("dense2", 10, "linear")]),
    # VGG-style blocks (3x3 "same" convolutions, BN, ReLU, pooling) with
    # Dropout, for Fashion-MNIST.
    "vgg_fashion": sequential("vgg_fashion", [
        inp([28, 28, 1]),
        conv("block1_conv", 32, 3, activation="linear", padding="same", kernel_init="HeNormal"),
        bn("block1_bn"), act("block1_relu", "relu"), pool("block1_pool", 2),
        conv("block2_conv", 64, 3, activation="linear", padding="same", kernel_init="HeNormal"),
        bn("block2_bn"), act("block2_relu", "relu"), pool("block2_pool", 2),
        dropout("block2_dropout", 0.25), flatten(),
        dense("fc1", 128, "linear"), bn("fc1_bn"), act("fc1_relu", "relu"),
        dropout("fc1_dropout", 0.5), dense("predictions", 10, "softmax")]),
    # 20,037,642 parameters: for communication benchmarks.
    "mlp_large": sequential("mlp_large", [
        inp([28, 28, 1]), flatten(), dense("dense1", 4096, "relu"), dense("dense2", 4096, "relu"),
        dense("dense3", 10, "linear")]),
    # 18,413,578 parameters in five hidden layers of one width: backprop
    # makes a layer's gradient final every fifth of the way, and the
    # forward pass needs the weights a fifth at a time, so a push or pull
    # that overlaps the step has something to hide behind (mlp_large's
    # 16.8 M-value middle layer is final just before its step ends).
    "mlp_deep": sequential("mlp_deep", [inp([28, 28, 1]), flatten()] + [
        dense("dense%d" % i, 2048, "relu") for i in range(1, 6)] + [
        dense("dense6", 10, "linear")]),
}

if __name__ == "__main__":
    for name, model in MODELS.items():
        doc = dict(model)
        doc["keras_version"] = "3.6.0"
        doc["backend"] = "tensorflow"
        with open("model/builtin/%s.json" % name, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
