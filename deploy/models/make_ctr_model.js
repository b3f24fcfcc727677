// Writes the click-through-rate models for Criteo data (docs/criteo.md,
// "Training on Criteo data"), with the real TensorFlow.js (npm
// @tensorflow/tfjs, installed with the Keras fixtures):
//   (cd tests/fixtures/keras && npm install)
//   node deploy/models/make_ctr_model.js [--kind=wide_deep|deepfm|dcn_v2|two_tower|esmm|mmoe|din]
//        [--input_dim=1000000] [--out=FILE] [--history=10] (din: the history's length)
//        [--factors=16] [--init_std=0.01]   (deepfm: the factor table's width and
//                                            its RandomNormal's stddev)
// Two inputs, as a Criteo folder's examples hold them: `dense`, the 13
// log-transformed integers, and `ids`, the 26 categorical features' rows
// of an Embedding of --input_dim rows (the data's criteo.json "buckets").
// ids -> Embedding(input_dim, 16) -> Flatten; Concatenate([dense, that])
// -> Dense(256, relu) -> Dense(128, relu) -> Dense(1, sigmoid) is
// ctr_wide_deep.json; ctr_deepfm.json adds first-order weights and a factorization
// machine over the 26 fields (see ctrDeepFm); ctr_dcn_v2.json is DCN-v2's
// cross network before a deep tower (see ctrDcnV2); ctr_two_tower.json
// splits the features between a user tower and an item tower scored by
// their Dot (see ctrTwoTower); ctr_esmm.json has two outputs, a click and
// a click-and-convert head (see ctrEsmm), ctr_mmoe.json two tasks over
// gated experts (see ctrMmoe); ctr_din.json attends from the
// item over the user's history (see ctrDin). The file is model.toJSON(), the
// JSON Keras's model.to_json() writes; it carries no loss (but ESMM's), and
// a sigmoid output trains on binary cross-entropy by default.
const path = require('path');
const fs = require('fs');

const repo = path.resolve(__dirname, '..', '..');
const tf = require(require.resolve('@tensorflow/tfjs', {
  paths: [process.cwd(), path.join(repo, 'tests', 'fixtures', 'keras')],
}));

function flag(name, fallback) {
  const prefix = `--${name}=`;
  const arg = process.argv.slice(2).find((a) => a.startsWith(prefix));
  return arg === undefined ? fallback : arg.slice(prefix.length);
}

function ctrWideDeep(inputDim) {
  const dense = tf.input({shape: [13], name: 'dense'});
  const ids = tf.input({shape: [26], name: 'ids'});
  const emb = tf.layers.embedding({inputDim, outputDim: 16, name: 'embedding'}).apply(ids);
  const flat = tf.layers.flatten({name: 'flat_embedding'}).apply(emb);
  let y = tf.layers.concatenate({name: 'features'}).apply([dense, flat]);
  y = tf.layers.dense({units: 256, activation: 'relu', name: 'hidden_1'}).apply(y);
  y = tf.layers.dense({units: 128, activation: 'relu', name: 'hidden_2'}).apply(y);
  const out = tf.layers.dense({units: 1, activation: 'sigmoid', name: 'click'}).apply(y);
  return tf.model({inputs: [dense, ids], outputs: out, name: 'ctr_wide_deep'});
}

// DeepFM (Guo et al. 2017) from plain Keras layers. Two tables over the
// same ids: first-order weights (1 wide, zeros: an id seen too rarely to
// learn stays worth nothing) and factors E ([26, factors], small normal).
// A factorization machine's pairwise term is
//   sum_{f<g} <E_f, E_g> = 1/2 sum_d ((sum_f E_fd)^2 - sum_f E_fd^2):
// per dimension, the square of the fields' sum (GlobalAveragePooling1D
// times 26, then Multiply with itself) plus minus the sum of the squares
// (Multiply, GlobalAveragePooling1D times -26; TensorFlow.js has no
// Subtract layer), then the half-sum over the dimensions (Reshape to a
// column, GlobalAveragePooling1D times factors / 2). As in the paper, the
// logit is the sum of the first-order weights, that pairwise term and the
// deep tower's output (a Dense over the dense features and the tower),
// then one sigmoid. (Until 2026-11-28 an output Dense weighed each field's
// first-order weight and each dimension's pairs, starting from random
// weights of either sign: on the benchmark's data its factorization
// machine learnt almost none of the planted interactions.)
function ctrDeepFm(inputDim) {
  const fields = 26;
  const factors = Number(flag('factors', '16'));
  const initStd = Number(flag('init_std', '0.01'));
  if (!Number.isInteger(factors) || factors < 1 || factors > 1024) {
    console.error(`error: --factors=${flag('factors', '')}: must be an integer in [1, 1024]`);
    process.exit(2);
  }
  if (!(initStd > 0 && initStd < 10)) {
    console.error(`error: --init_std=${flag('init_std', '')}: must be in (0, 10)`);
    process.exit(2);
  }
  const dense = tf.input({shape: [13], name: 'dense'});
  const ids = tf.input({shape: [fields], name: 'ids'});
  const linear = tf.layers.embedding({
    inputDim, outputDim: 1, embeddingsInitializer: 'zeros', name: 'linear_embedding',
  }).apply(ids);
  const emb = tf.layers.embedding({
    inputDim, outputDim: factors,
    embeddingsInitializer: tf.initializers.randomNormal({mean: 0, stddev: initStd}),
    name: 'embedding',
  }).apply(ids);
  const flat = tf.layers.flatten({name: 'flat_embedding'}).apply(emb);
  const mean = tf.layers.globalAveragePooling1d({name: 'field_mean'}).apply(emb);
  const sum = tf.layers.rescaling({scale: fields, name: 'field_sum'}).apply(mean);
  const sumSquared = tf.layers.multiply({name: 'field_sum_squared'}).apply([sum, sum]);
  const squares = tf.layers.multiply({name: 'squares'}).apply([emb, emb]);
  const squaresMean = tf.layers.globalAveragePooling1d({name: 'squares_mean'}).apply(squares);
  const minusSquaresSum =
      tf.layers.rescaling({scale: -fields, name: 'minus_squares_sum'}).apply(squaresMean);
  const pairs = tf.layers.add({name: 'pair_interactions'}).apply([sumSquared, minusSquaresSum]);
  const pairColumn =
      tf.layers.reshape({targetShape: [factors, 1], name: 'pair_column'}).apply(pairs);
  const pairMean = tf.layers.globalAveragePooling1d({name: 'pair_mean'}).apply(pairColumn);
  const secondOrder =
      tf.layers.rescaling({scale: factors / 2, name: 'second_order'}).apply(pairMean);
  const linearMean = tf.layers.globalAveragePooling1d({name: 'linear_mean'}).apply(linear);
  const firstOrder = tf.layers.rescaling({scale: fields, name: 'first_order'}).apply(linearMean);
  let deep = tf.layers.concatenate({name: 'deep_input'}).apply([dense, flat]);
  deep = tf.layers.dense({units: 128, activation: 'relu', name: 'hidden_1'}).apply(deep);
  deep = tf.layers.dense({units: 64, activation: 'relu', name: 'hidden_2'}).apply(deep);
  const features = tf.layers.concatenate({name: 'features'}).apply([dense, deep]);
  const deepLogit = tf.layers.dense({units: 1, name: 'deep_logit'}).apply(features);
  const logit = tf.layers.add({name: 'logit'}).apply([deepLogit, firstOrder, secondOrder]);
  const out = tf.layers.activation({activation: 'sigmoid', name: 'click'}).apply(logit);
  return tf.model({inputs: [dense, ids], outputs: out, name: 'ctr_deepfm'});
}

// DCN-v2 (Wang et al. 2021), the stacked form, from plain Keras layers:
// x0 = [dense, the 26 fields' rows of an Embedding(input_dim, 8)], two
// cross layers x_{l+1} = x0 * (W_l x_l + b_l) + x_l (Dense, Multiply, Add:
// full-rank W, 221 x 221), then Dense(128, relu) -> Dense(64, relu) ->
// Dense(1, sigmoid).
function ctrDcnV2(inputDim) {
  const dense = tf.input({shape: [13], name: 'dense'});
  const ids = tf.input({shape: [26], name: 'ids'});
  const emb = tf.layers.embedding({inputDim, outputDim: 8, name: 'embedding'}).apply(ids);
  const flat = tf.layers.flatten({name: 'flat_embedding'}).apply(emb);
  const x0 = tf.layers.concatenate({name: 'x0'}).apply([dense, flat]);
  const width = 13 + 26 * 8;
  let x = x0;
  for (const l of [1, 2]) {
    const wx = tf.layers.dense({units: width, name: `cross_${l}`}).apply(x);
    const gated = tf.layers.multiply({name: `cross_${l}_x0`}).apply([x0, wx]);
    x = tf.layers.add({name: `cross_${l}_out`}).apply([gated, x]);
  }
  x = tf.layers.dense({units: 128, activation: 'relu', name: 'hidden_1'}).apply(x);
  x = tf.layers.dense({units: 64, activation: 'relu', name: 'hidden_2'}).apply(x);
  const out = tf.layers.dense({units: 1, activation: 'sigmoid', name: 'click'}).apply(x);
  return tf.model({inputs: [dense, ids], outputs: out, name: 'ctr_dcn_v2'});
}

// Two towers (as in retrieval, YouTube's and Yi et al. 2019): the 13
// integers and the first 13 categorical fields are the user's
// (`user_ids`), the last 13 the item's (`item_ids`): inputs dense [13],
// user_ids [13], item_ids [13], the 39 values of a Criteo example in
// order. Each tower maps its fields' rows (an Embedding(input_dim, 8)
// each) through Dense(64, relu) -> Dense(16); the click's logit is the
// Dot of the two 16-vectors, then one sigmoid.
function ctrTwoTower(inputDim) {
  const dense = tf.input({shape: [13], name: 'dense'});
  const userIds = tf.input({shape: [13], name: 'user_ids'});
  const itemIds = tf.input({shape: [13], name: 'item_ids'});
  const tower = (name, parts) => {
    let y = parts.length > 1 ? tf.layers.concatenate({name: `${name}_features`}).apply(parts)
                             : parts[0];
    y = tf.layers.dense({units: 64, activation: 'relu', name: `${name}_hidden`}).apply(y);
    return tf.layers.dense({units: 16, name: `${name}_vector`}).apply(y);
  };
  const rows = (name, input) => {
    const e = tf.layers.embedding({inputDim, outputDim: 8, name: `${name}_embedding`})
        .apply(input);
    return tf.layers.flatten({name: `${name}_rows`}).apply(e);
  };
  const user = tower('user', [dense, rows('user', userIds)]);
  const item = tower('item', [rows('item', itemIds)]);
  const logit = tf.layers.dot({axes: 1, name: 'score'}).apply([user, item]);
  const out = tf.layers.activation({activation: 'sigmoid', name: 'click'}).apply(logit);
  return tf.model({inputs: [dense, userIds, itemIds], outputs: out, name: 'ctr_two_tower'});
}

// ESMM (Ma et al. 2018): a click tower and a conversion tower over shared
// features (dense and the 26 fields' rows of one Embedding(input_dim, 8)),
// each Dense(128, relu) -> Dense(64, relu) -> Dense(1, sigmoid), 'ctr'
// and 'cvr'; the outputs are 'ctr' (trained on the click) and 'ctcvr',
// their product (trained on a click followed by a conversion), so the
// conversion tower learns P(convert | click) from every impression. Both
// outputs' binary cross-entropy, weights 1, are in the file's
// training_config, as tf.keras writes a compiled model's.
function ctrEsmm(inputDim) {
  const dense = tf.input({shape: [13], name: 'dense'});
  const ids = tf.input({shape: [26], name: 'ids'});
  const emb = tf.layers.embedding({inputDim, outputDim: 8, name: 'embedding'}).apply(ids);
  const flat = tf.layers.flatten({name: 'flat_embedding'}).apply(emb);
  const x = tf.layers.concatenate({name: 'features'}).apply([dense, flat]);
  const tower = (name) => {
    let y = tf.layers.dense({units: 128, activation: 'relu', name: `${name}_hidden_1`}).apply(x);
    y = tf.layers.dense({units: 64, activation: 'relu', name: `${name}_hidden_2`}).apply(y);
    return tf.layers.dense({units: 1, activation: 'sigmoid', name}).apply(y);
  };
  const ctr = tower('ctr');
  const cvr = tower('cvr');
  const ctcvr = tf.layers.multiply({name: 'ctcvr'}).apply([ctr, cvr]);
  const model = tf.model({inputs: [dense, ids], outputs: [ctr, ctcvr], name: 'ctr_esmm'});
  const json = model.toJSON(null, false);
  json.training_config = {
    loss: {ctr: 'binary_crossentropy', ctcvr: 'binary_crossentropy'},
    loss_weights: {ctr: 1.0, ctcvr: 1.0},
  };
  return json;
}

// MMoE (Ma et al. 2018): experts shared by two tasks, each task mixing
// them by a gate of its own. Over the shared features (dense and the 26
// fields' rows of one Embedding(input_dim, 8)), four experts Dense(64,
// relu), each made a row [1, 64] (Reshape) and stacked along the steps
// (Concatenate(axis=1): [4, 64]); per task a gate Dense(4, softmax), made
// a column [4, 1], weighs them (Dot(axes=[1, 1]): the gate's weights
// times the experts, summed: [1, 64]), into a tower Dense(32, relu) ->
// Dense(1, sigmoid). The tasks are the click ('ctr') and the click
// followed by a conversion ('ctcvr'), each on its own binary
// cross-entropy (weights 1, the file's training_config), on data of
// criteo_synth --conversions.
function ctrMmoe(inputDim) {
  const experts = 4;
  const dense = tf.input({shape: [13], name: 'dense'});
  const ids = tf.input({shape: [26], name: 'ids'});
  const emb = tf.layers.embedding({inputDim, outputDim: 8, name: 'embedding'}).apply(ids);
  const flat = tf.layers.flatten({name: 'flat_embedding'}).apply(emb);
  const x = tf.layers.concatenate({name: 'features'}).apply([dense, flat]);
  const rows = [];
  for (let e = 0; e < experts; ++e) {
    const y = tf.layers.dense({units: 64, activation: 'relu', name: `expert_${e}`}).apply(x);
    rows.push(tf.layers.reshape({targetShape: [1, 64], name: `expert_${e}_row`}).apply(y));
  }
  const stacked = tf.layers.concatenate({axis: 1, name: 'experts'}).apply(rows);
  const task = (name) => {
    const gate = tf.layers.dense({units: experts, activation: 'softmax', name: `${name}_gate`})
        .apply(x);
    const column = tf.layers.reshape({targetShape: [experts, 1], name: `${name}_gate_column`})
        .apply(gate);
    const mixed = tf.layers.dot({axes: [1, 1], name: `${name}_mixture`}).apply([column, stacked]);
    let y = tf.layers.flatten({name: `${name}_input`}).apply(mixed);
    y = tf.layers.dense({units: 32, activation: 'relu', name: `${name}_hidden`}).apply(y);
    return tf.layers.dense({units: 1, activation: 'sigmoid', name}).apply(y);
  };
  const model = tf.model({inputs: [dense, ids], outputs: [task('ctr'), task('ctcvr')],
                          name: 'ctr_mmoe'});
  const json = model.toJSON(null, false);
  json.training_config = {
    loss: {ctr: 'binary_crossentropy', ctcvr: 'binary_crossentropy'},
    loss_weights: {ctr: 1.0, ctcvr: 1.0},
  };
  return json;
}

// DIN (Zhou et al. 2018)'s target attention over a behaviour sequence, on
// data of criteo_synth --history=N (docs/criteo.md, "Behaviour sequences"):
// inputs dense [13], ids [26] (the fields' rows of Embedding(input_dim,
// 8)), item [1] and history [N] (1 + C1's rows, 0 padding). The item's
// row of Embedding(input_dim + 1, 8) attends over the history's rows of
// another, Embedding(input_dim + 1, 8, mask_zero) (Keras's dot-product
// Attention: the history's mask masks the padded keys); the interest it
// gives, the item's row, dense and the fields' rows are concatenated into
// Dense(128, relu) -> Dense(64, relu) -> Dense(1, sigmoid). TensorFlow.js
// has no Attention layer: the file is written here in Keras 3's own form
// (model.to_json()), which the parser reads and Keras 3 loads. The item's
// table has no mask: a masked query would carry its mask into the
// Flatten, which Keras does not mask.
function ctrDin(inputDim, history) {
  const tensor = (layer) => ({class_name: '__keras_tensor__',
                              config: {shape: null, dtype: 'float32', keras_history: [layer, 0, 0]}});
  const layer = (cls, name, config, args) => ({
    module: 'keras.layers', class_name: cls, registered_name: null, name,
    config: Object.assign({name, trainable: true, dtype: 'float32'}, config),
    inbound_nodes: args === undefined ? [] : [{args: [args], kwargs: {}}],
  });
  const input = (name, width) => layer('InputLayer', name, {batch_shape: [null, width],
                                                            sparse: false});
  const embedding = (name, rows, read, maskZero) => layer('Embedding', name, {
    input_dim: rows, output_dim: 8, mask_zero: maskZero,
    embeddings_initializer: {module: 'keras.initializers', class_name: 'RandomUniform',
                             config: {minval: -0.05, maxval: 0.05, seed: null}},
  }, tensor(read));
  const dense = (name, units, activation, read) =>
    layer('Dense', name, {units, activation, use_bias: true}, tensor(read));
  const layers = [
    input('dense', 13), input('ids', 26), input('item', 1), input('history', history),
    embedding('embedding', inputDim, 'ids', false),
    embedding('item_embedding', inputDim + 1, 'item', false),
    embedding('history_embedding', inputDim + 1, 'history', true),
    layer('Attention', 'interest', {use_scale: false, score_mode: 'dot', dropout: 0.0, seed: null},
          [tensor('item_embedding'), tensor('history_embedding')]),
    layer('Flatten', 'flat_embedding', {data_format: 'channels_last'}, tensor('embedding')),
    layer('Flatten', 'flat_item', {data_format: 'channels_last'}, tensor('item_embedding')),
    layer('Flatten', 'flat_interest', {data_format: 'channels_last'}, tensor('interest')),
    layer('Concatenate', 'features', {axis: -1},
          [tensor('dense'), tensor('flat_embedding'), tensor('flat_item'),
           tensor('flat_interest')]),
    dense('hidden_1', 128, 'relu', 'features'),
    dense('hidden_2', 64, 'relu', 'hidden_1'),
    dense('click', 1, 'sigmoid', 'hidden_2'),
  ];
  return {module: 'keras', class_name: 'Functional', registered_name: 'Functional',
          keras_version: '3.6.0',
          config: {name: 'ctr_din', trainable: true, layers,
                   input_layers: [['dense', 0, 0], ['ids', 0, 0], ['item', 0, 0],
                                  ['history', 0, 0]],
                   output_layers: [['click', 0, 0]]}};
}

const kinds = {wide_deep: ctrWideDeep, deepfm: ctrDeepFm, dcn_v2: ctrDcnV2,
               two_tower: ctrTwoTower, esmm: ctrEsmm, mmoe: ctrMmoe,
               din: (inputDim) => ctrDin(inputDim, historyLength())};
const kind = flag('kind', 'wide_deep');
if (!(kind in kinds)) {
  console.error(`error: --kind=${kind}: must be one of ${Object.keys(kinds).join(', ')}`);
  process.exit(2);
}
const inputDim = Number(flag('input_dim', '1000000'));
if (!Number.isInteger(inputDim) || inputDim < 1 || inputDim > 2 ** 24) {
  console.error(`error: --input_dim=${flag('input_dim', '')}: must be an integer in [1, 2^24]`);
  process.exit(2);
}
function historyLength() {
  const n = Number(flag('history', '10'));
  if (!Number.isInteger(n) || n < 1 || n > 64) {
    console.error(`error: --history=${flag('history', '')}: must be an integer in [1, 64]`);
    process.exit(2);
  }
  return n;
}
const out = flag('out', path.join(__dirname, `ctr_${kind}.json`));
const made = kinds[kind](inputDim);
const json = made.toJSON === undefined ? made : made.toJSON(null, false);
fs.writeFileSync(out, JSON.stringify(json) + '\n');
console.log(`wrote ${out}`);
