// The frozen graph as a node diagram: columns by longest path over same-step edges;
// next_iteration edges (to the next step) are drawn dashed, routed below the nodes.

import { svg } from "./dom.js";
import { truncate } from "./format.js";

const NODE_W = 190, HEAD_H = 40, PORT_H = 16, GAP_X = 90, GAP_Y = 30, PAD = 26;
const LEFT = 80; // room left of the first column for next_iteration edges coming back in

function portRef(ref) {
  if (typeof ref === "string") {
    const dot = ref.indexOf(".");
    return { node: ref.slice(0, dot), port: ref.slice(dot + 1) };
  }
  return { node: ref?.node, port: ref?.port };
}

function graphPorts(nodeList, edges) {
  const ports = new Map(nodeList.map((n) => [n.id, { ins: [], outs: [] }]));
  const add = (list, port) => { if (!list.includes(port)) list.push(port); };
  for (const e of edges) {
    if (ports.has(e.from.node)) add(ports.get(e.from.node).outs, e.from.port);
    if (ports.has(e.to.node)) add(ports.get(e.to.node).ins, e.to.port);
  }
  return ports;
}

function graphLayers(nodeList, edges) {
  const layer = new Map(nodeList.map((n) => [n.id, 0]));
  const forward = edges.filter((e) => !e.next && e.from.node !== e.to.node
    && layer.has(e.from.node) && layer.has(e.to.node));
  for (let round = 0; round < nodeList.length; round++) {
    let changed = false;
    for (const e of forward) {
      const want = layer.get(e.from.node) + 1;
      if (want > layer.get(e.to.node) && want < nodeList.length) {
        layer.set(e.to.node, want);
        changed = true;
      }
    }
    if (!changed) break;
  }
  return layer;
}

function placeNodes(nodeList, layers, ports) {
  const columns = new Map();
  nodeList.forEach((n, order) => {
    const c = layers.get(n.id);
    if (!columns.has(c)) columns.set(c, []);
    columns.get(c).push({ n, order });
  });
  const boxes = new Map();
  for (const [c, list] of columns) {
    list.sort((a, b) => String(a.n.scope).localeCompare(String(b.n.scope)) || a.order - b.order);
    let y = PAD + 18;
    for (const { n } of list) {
      const p = ports.get(n.id);
      const height = HEAD_H + Math.max(p.ins.length, p.outs.length, 1) * PORT_H + 8;
      boxes.set(n.id, { x: LEFT + c * (NODE_W + GAP_X), y, w: NODE_W, h: height });
      y += height + GAP_Y;
    }
  }
  return boxes;
}

function portPoint(boxes, ports, ref, side) {
  const box = boxes.get(ref.node);
  const i = Math.max(0, ports.get(ref.node)[side].indexOf(ref.port));
  return { x: side === "outs" ? box.x + box.w : box.x, y: box.y + HEAD_H + i * PORT_H + PORT_H / 2 };
}

function edgePath(edge, layout, lane) {
  const a = portPoint(layout.boxes, layout.ports, edge.from, "outs");
  const b = portPoint(layout.boxes, layout.ports, edge.to, "ins");
  if (!edge.next && b.x > a.x) {
    const dx = Math.max(30, (b.x - a.x) / 2);
    return `M${a.x},${a.y} C${a.x + dx},${a.y} ${b.x - dx},${b.y} ${b.x},${b.y}`;
  }
  const y = layout.bottom + 18 + lane * 14;
  return `M${a.x},${a.y} C${a.x + 60},${a.y} ${a.x + 60},${y} ${a.x},${y} `
    + `L${b.x},${y} C${b.x - 60},${y} ${b.x - 60},${b.y} ${b.x},${b.y}`;
}

function nodeBox(node, box, ports, envNodeset) {
  const kind = String(node.type).startsWith(`${envNodeset}.`) ? "env"
    : String(node.type).startsWith("core.") ? "core" : "model";
  const group = svg("g", { class: `node ${kind}`, "data-node": node.id });
  group.append(svg("title", {}, `${node.id} (${node.type})${node.scope ? ` · scope ${node.scope}` : ""}`));
  group.append(svg("rect", { x: box.x, y: box.y, width: box.w, height: box.h, rx: 7 }));
  group.append(svg("text", { class: "node-id", x: box.x + 10, y: box.y + 17 }, truncate(node.id, 22)));
  group.append(svg("text", { class: "node-type", x: box.x + 10, y: box.y + 32 }, truncate(node.type, 28)));
  const p = ports.get(node.id);
  const rowY = (i) => box.y + HEAD_H + i * PORT_H;
  p.ins.forEach((port, i) => group.append(portMark(box.x, rowY(i), port, "in")));
  p.outs.forEach((port, i) => group.append(portMark(box.x + box.w, rowY(i), port, "out")));
  return group;
}

function portMark(x, y, port, side) {
  const mid = y + PORT_H / 2;
  const label = side === "in" ? { x: x + 8, "text-anchor": "start" } : { x: x - 8, "text-anchor": "end" };
  return svg("g", { class: `port ${side}` },
    svg("circle", { cx: x, cy: mid, r: 3.5 }),
    svg("text", { ...label, y: mid + 4 }, truncate(port, 18)));
}

function scopeFrames(graph, nodeList, boxes) {
  return (graph.scopes ?? []).flatMap((scope) => {
    const inside = nodeList.filter((n) => n.scope === scope.id).map((n) => boxes.get(n.id));
    if (!inside.length) return [];
    const x = Math.min(...inside.map((b) => b.x)) - 10;
    const y = Math.min(...inside.map((b) => b.y)) - 22;
    const w = Math.max(...inside.map((b) => b.x + b.w)) + 10 - x;
    const hgt = Math.max(...inside.map((b) => b.y + b.h)) + 10 - y;
    return [svg("g", { class: "scope" },
      svg("rect", { x, y, width: w, height: hgt, rx: 10 }),
      svg("text", { x: x + 8, y: y + 14 }, scope.label || scope.id))];
  });
}

function arrowMarker() {
  return svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
  svg("path", { d: "M0,0 L10,5 L0,10 z" })));
}

export function graphDiagram(graph) {
  const nodeList = graph.nodes ?? [];
  const edges = (graph.edges ?? []).map((e) => ({
    from: portRef(e.source), to: portRef(e.target), next: Boolean(e.next_iteration),
  })).filter((e) => nodeList.some((n) => n.id === e.from.node) && nodeList.some((n) => n.id === e.to.node));
  const ports = graphPorts(nodeList, edges);
  const boxes = placeNodes(nodeList, graphLayers(nodeList, edges), ports);
  const all = [...boxes.values()];
  const bottom = Math.max(PAD, ...all.map((b) => b.y + b.h));
  const layout = { boxes, ports, bottom };
  const backEdges = edges.filter((e) => e.next || boxes.get(e.to.node).x <= boxes.get(e.from.node).x);
  const width = Math.max(...all.map((b) => b.x + b.w), 200) + LEFT;
  const height = bottom + 30 + backEdges.length * 14;
  const label = `graph ${graph.name ?? ""}: ${nodeList.length} nodes, ${edges.length} edges`;
  const diagram = svg("svg", { class: "graph", viewBox: `0 0 ${width} ${height}`, width,
    role: "img", "aria-label": label });
  diagram.append(arrowMarker(), ...scopeFrames(graph, nodeList, boxes));
  edges.forEach((edge) => {
    const lane = backEdges.indexOf(edge);
    const title = `${edge.from.node}.${edge.from.port} → ${edge.to.node}.${edge.to.port}`
      + (edge.next ? " (next iteration)" : "");
    diagram.append(svg("path", { class: edge.next ? "edge next" : "edge",
      d: edgePath(edge, layout, lane), "marker-end": "url(#arrow)" }, svg("title", {}, title)));
  });
  nodeList.forEach((n) => diagram.append(nodeBox(n, boxes.get(n.id), ports, graph.env?.nodeset)));
  return diagram;
}
