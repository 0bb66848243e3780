// Reads a .heapsnapshot with memlab (@memlab/core) and prints its retained sizes by node id.
const core = require('@memlab/core');
const TraceFinder = require(require('path').join(__dirname, 'node_modules/@memlab/core/dist/paths/TraceFinder.js')).default;
(async () => {
  const heap = await core.utils.getSnapshotFromFile(process.argv[2], {buildNodeIdIndex: true});
  new TraceFinder().calculateAllNodesRetainedSizes(heap);
  const out = {nodes: heap.nodes.length, edges: heap.edges.length, retained: {}};
  for (const id of process.argv.slice(3).map(Number)) {
    const node = heap.getNodeById(id);
    out.retained[id] = node ? {retained: node.retainedSize, self: node.self_size, name: node.name} : null;
  }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
