// Re-evaluates a run's exported weights with the real TensorFlow.js: loads
// the Keras model file (model.toJSON() / model.json), sets every layer's
// weights from the run's model.safetensors (names "<layer>/<variable>",
// Keras layouts), and scores the test split of an MNIST-style IDX folder.
//   cd tests/fixtures/keras && npm install && cd ../../.. &&
//   NODE_PATH=tests/fixtures/keras/node_modules \
//     node tests/tools/tfjs_evaluate.js MODEL.json WEIGHTS.safetensors DATA_DIR
// Prints "tfjs_evaluate: accuracy=A loss=L examples=N" (sparse categorical
// cross-entropy; softmax outputs are read as probabilities, linear ones as
// logits). Exit 2 on a bad argument, 1 on a mismatch between model and file.
const tf = require('@tensorflow/tfjs');
const fs = require('fs');
const zlib = require('zlib');

function fail(code, msg) {
  console.error('tfjs_evaluate: ' + msg);
  process.exit(code);
}

function readSafetensors(path) {
  const buf = fs.readFileSync(path);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const data = buf.subarray(8 + n);
  const tensors = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    if (t.dtype !== 'F32') fail(1, `${path}: ${name} is ${t.dtype}, not F32`);
    const [begin, end] = t.data_offsets;
    const bytes = data.subarray(begin, end);
    const copy = new Float32Array((end - begin) / 4);
    for (let i = 0; i < copy.length; ++i) copy[i] = bytes.readFloatLE(i * 4);
    tensors[name] = {shape: t.shape, values: copy};
  }
  return tensors;
}

function readIdx(path) {
  let buf = fs.readFileSync(path);
  if (buf[0] === 0x1f && buf[1] === 0x8b) buf = zlib.gunzipSync(buf);
  const dims = buf[3];
  const shape = [];
  for (let i = 0; i < dims; ++i) shape.push(buf.readUInt32BE(4 + 4 * i));
  return {shape, data: buf.subarray(4 + 4 * dims)};
}

(async () => {
  const [modelPath, weightsPath, dataDir] = process.argv.slice(2);
  if (!modelPath || !weightsPath || !dataDir) {
    fail(2, 'usage: tfjs_evaluate.js MODEL.json WEIGHTS.safetensors DATA_DIR');
  }
  let doc = JSON.parse(fs.readFileSync(modelPath, 'utf8'));
  if (doc.modelTopology) doc = doc.modelTopology;
  const model = await tf.models.modelFromJSON({modelTopology: doc});
  const weights = readSafetensors(weightsPath);
  const used = new Set();
  for (const layer of model.layers) {
    if (layer.weights.length === 0) continue;
    layer.setWeights(layer.weights.map((w) => {
      const name = layer.name + '/' + w.name.split('/').slice(-1)[0].replace(/_\d+$/, '');
      const t = weights[name];
      if (!t) fail(1, `${weightsPath} has no ${name}`);
      used.add(name);
      return tf.tensor(t.values, w.shape);
    }));
  }
  for (const name of Object.keys(weights)) {
    if (!used.has(name)) fail(1, `${weightsPath}: ${name} is no layer's weight`);
  }
  const images = readIdx(`${dataDir}/t10k-images-idx3-ubyte.gz`);
  const labels = readIdx(`${dataDir}/t10k-labels-idx1-ubyte.gz`);
  const count = images.shape[0];
  const inShape = model.inputs[0].shape.slice(1);
  const pixels = inShape.reduce((a, b) => a * b, 1);
  const softmax = model.layers[model.layers.length - 1].getConfig().activation === 'softmax';
  let right = 0, lossSum = 0;
  const batch = 500;
  for (let begin = 0; begin < count; begin += batch) {
    const n = Math.min(batch, count - begin);
    const x = new Float32Array(n * pixels);
    for (let i = 0; i < n * pixels; ++i) x[i] = images.data[begin * pixels + i] / 255;
    const y = tf.tidy(() => {
      const out = model.predict(tf.tensor(x, [n].concat(inShape)));
      return softmax ? out : tf.softmax(out);
    });
    const p = await y.data();
    y.dispose();
    const classes = p.length / n;
    for (let i = 0; i < n; ++i) {
      const label = labels.data[begin + i];
      let best = 0;
      for (let j = 1; j < classes; ++j) if (p[i * classes + j] > p[i * classes + best]) best = j;
      if (best === label) ++right;
      lossSum += -Math.log(Math.max(p[i * classes + label], 1e-7));
    }
  }
  console.log(`tfjs_evaluate: accuracy=${(right / count).toFixed(4)} loss=${
      (lossSum / count).toFixed(4)} examples=${count}`);
})();
