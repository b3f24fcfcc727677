// Writes ctr_wide_deep.json, a click-through-rate model for Criteo data
// (docs/criteo.md, "Training on Criteo data"), with the real TensorFlow.js
// (npm @tensorflow/tfjs, installed with the Keras fixtures):
//   (cd tests/fixtures/keras && npm install)
//   node deploy/models/make_ctr_model.js [--input_dim=1000000] [--out=FILE]
// Two inputs, as a Criteo folder's examples hold them: `dense`, the 13
// log-transformed integers, and `ids`, the 26 categorical features' rows
// of an Embedding of --input_dim rows (the data's criteo.json "buckets").
// ids -> Embedding(input_dim, 16) -> Flatten; Concatenate([dense, that])
// -> Dense(256, relu) -> Dense(128, relu) -> Dense(1, sigmoid). The file is
// model.toJSON(), the JSON Keras's model.to_json() writes; it carries no
// loss, and a sigmoid output trains on binary cross-entropy by default.
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

const inputDim = Number(flag('input_dim', '1000000'));
if (!Number.isInteger(inputDim) || inputDim < 1 || inputDim > 2 ** 24) {
  console.error(`error: --input_dim=${flag('input_dim', '')}: must be an integer in [1, 2^24]`);
  process.exit(2);
}
const out = flag('out', path.join(__dirname, 'ctr_wide_deep.json'));
fs.writeFileSync(out, JSON.stringify(ctrWideDeep(inputDim).toJSON(null, false)) + '\n');
console.log(`wrote ${out}`);
