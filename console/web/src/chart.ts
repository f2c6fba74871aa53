// Charts, drawn by uPlot: a bar chart of counts over time (the timeline)
// and line charts of rates (the overview). Each follows its container's
// width.

import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface Chart {
  /** set replaces the data: x in seconds since the epoch, one array per series. */
  set(x: number[], ...ys: (number | null)[][]): void;
  destroy(): void;
}

function follow(u: uPlot, el: HTMLElement, height: number): () => void {
  const ro = new ResizeObserver(() => {
    const w = Math.max(200, el.clientWidth);
    if (w !== u.width) u.setSize({ width: w, height });
  });
  ro.observe(el);
  return () => ro.disconnect();
}

const pad = (n: number) => String(n).padStart(2, "0");

/**
 * timeAxis labels a time axis in local time, unambiguously: the year in
 * full, month and day as numbers, as fine as the ticks are apart
 * (2026-12-05, 12-05 14:00, 14:05:30).
 */
const timeAxis: uPlot.Axis = {
  space: 70,
  values: (u, splits, _axis, _space, incr) => {
    const range = (u.scales.x.max ?? 0) - (u.scales.x.min ?? 0);
    return splits.map((v) => {
      const d = new Date(v * 1000);
      const ymd = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
      const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
      if (incr >= 28 * 86400) return `${d.getFullYear()}-${pad(d.getMonth() + 1)}`;
      if (incr >= 86400) return ymd;
      if (range > 86400) return `${ymd.slice(5)} ${hm}`;
      return incr < 60 ? `${hm}:${pad(d.getSeconds())}` : hm;
    });
  },
};

const colors = ["#2563eb", "#16a34a", "#dc2626", "#9333ea"];

/**
 * bars is a bar chart of counts per time bin: x is each bin's start; with
 * log, its y axis is logarithmic (a bin of 1 still shows beside one of a
 * million). onZoom is called with the range a user selects by dragging.
 */
export function bars(el: HTMLElement, label: string, height: number, log: boolean, onZoom?: (fromSec: number, toSec: number) => void): Chart {
  const opts: uPlot.Options = {
    width: Math.max(200, el.clientWidth),
    height,
    legend: { live: true },
    cursor: { drag: { x: true, y: false, setScale: false } },
    scales: { x: { time: true }, y: log ? { distr: 3, log: 10 } : {} },
    axes: [timeAxis, { size: 70, values: (_u, vals) => vals.map((v) => (v === null ? "" : compact(v))) }],
    series: [
      {},
      {
        label,
        fill: "rgba(37, 99, 235, 0.55)",
        stroke: colors[0],
        width: 1,
        paths: uPlot.paths.bars!({ size: [0.9, 80, 1], align: 1 }),
        points: { show: false },
      },
    ],
    hooks: {
      setSelect: [
        (u) => {
          if (!onZoom || u.select.width < 5) return;
          const from = u.posToVal(u.select.left, "x");
          const to = u.posToVal(u.select.left + u.select.width, "x");
          u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          onZoom(from, to);
        },
      ],
    },
  };
  const u = new uPlot(opts, [[], []], el);
  const stop = follow(u, el, height);
  return {
    // A log axis has no 0: empty bins are gaps.
    set: (x, ...ys) => u.setData([x, ...(log ? ys.map((y) => y.map((v) => (v ? v : null))) : ys)] as uPlot.AlignedData),
    destroy: () => {
      stop();
      u.destroy();
    },
  };
}

/**
 * lines is a line chart of a few series over time up to the latest
 * sample, at most `windowSec` seconds of it, sharing one y axis.
 */
export function lines(el: HTMLElement, labels: string[], height: number, unit: string, windowSec: number): Chart {
  const opts: uPlot.Options = {
    width: Math.max(200, el.clientWidth),
    height,
    scales: {
      // From the first sample (at least a minute back) to the latest, at most windowSec.
      x: {
        time: true,
        range: (_u, min, max) => {
          if (max === null || !Number.isFinite(max)) max = Date.now() / 1000; // no samples yet
          return [Math.min(max - 60, Math.max(min ?? max, max - windowSec)), max];
        },
      },
      y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] },
    },
    axes: [timeAxis, { size: 60, values: (_u, vals) => vals.map((v) => compact(v) + unit) }],
    series: [{}, ...labels.map((l, i) => ({ label: l, stroke: colors[i % colors.length], width: 2 }))],
  };
  const u = new uPlot(opts, [[], ...labels.map(() => [])], el);
  const stop = follow(u, el, height);
  return {
    set: (x, ...ys) => u.setData([x, ...ys] as uPlot.AlignedData),
    destroy: () => {
      stop();
      u.destroy();
    },
  };
}

function compact(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e9) return `${+(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return `${+v.toFixed(2)}`;
}
