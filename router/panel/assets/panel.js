// Status page of the warden: renders /warden/status (badges, replica table,
// token chart) and polls it every 2 s. No dependencies, nothing remote.
// The number formats match format.go (the browser test checks they agree).
'use strict';
(function () {
  const POLL_MS = 2000;
  const HOUR = 3600;
  const SVG = 'http://www.w3.org/2000/svg';

  const fmt = {
    pct: (x) => (x * 100).toFixed(1) + '%',
    tokens: (n) => n < 999.5 ? n.toFixed(0) : n < 999950 ? (n / 1e3).toFixed(1) + 'k' : (n / 1e6).toFixed(2) + 'M',
    bytes: (n) => {
      const mib = 2 ** 20, gib = 2 ** 30, tib = 2 ** 40;
      if (!(n > 0)) return '0';
      if (n < gib - mib / 2) return (n / mib).toFixed(0) + 'M';
      if (n < 99.95 * gib) return (n / gib).toFixed(1) + 'G';
      if (n < 1023.5 * gib) return (n / gib).toFixed(0) + 'G';
      return (n / tib).toFixed(2) + 'T';
    },
    ibytes: (n) => {
      const b = fmt.bytes(n);
      return b === '0' ? '0 B' : b.slice(0, -1) + ' ' + b.slice(-1) + 'iB';
    },
    num: (x) => String(x),
    gpus: (g) => (g && g.length ? g.join(',') : '-'),
    up: (r) => (r.up ? 'up' : (r.state || 'down')),
    onOff: (b) => (b ? 'on' : 'off'),
    sessions: (n, sub) => (sub > 0 ? n + ' (' + sub + ' subagents)' : String(n)),
    // activeSessions mirrors fmtActiveSessions in table.go: the sessions the
    // table totals (a turn within the active window), and the remembered ones.
    activeSessions: (s) => {
      const n = s.active_window_seconds > 0 ? (s.concurrent_sessions || 0) : (s.sessions || 0);
      return (s.sessions || 0) !== n ? n + ' (' + (s.sessions || 0) + ' remembered)' : String(n);
    },
    duration: (sec) => {
      sec = Math.round(sec);
      const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), s = sec % 60;
      const p = (v) => String(v).padStart(2, '0');
      if (h > 0) return h + 'h' + p(m) + 'm' + p(s) + 's';
      if (m > 0) return m + 'm' + p(s) + 's';
      return s + 's';
    },
  };
  const ratio = (a, b) => (b === 0 ? 0 : a / b);
  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  function badge(id, label, value, cls) {
    const b = el('span', undefined, 'badge' + (cls ? ' ' + cls : ''));
    b.id = 'badge-' + id;
    b.append(el('b', label), document.createTextNode(value));
    return b;
  }

  function renderBadges(s) {
    const spill = String(s.spill_threshold) + (s.spill_threshold_auto ? ' (auto)' : '');
    $('badges').replaceChildren(
      badge('policy', 'policy', s.policy || ''),
      badge('affinity', 'affinity', fmt.onOff(s.affinity), s.affinity ? 'on' : 'off'),
      badge('spill', 'spill threshold', spill),
      badge('sticky', 'sticky share', fmt.pct(s.sticky_share || 0)),
      badge('inflight', 'in flight', String(s.in_flight || 0)),
      badge('sessions', 'sessions', fmt.activeSessions(s)),
      ...(s.subagent_sessions > 0 ? [badge('subagents', 'subagents', String(s.subagent_sessions))] : []),
      ...(s.max_model_len > 0 ? [badge('context', 'context', String(s.max_model_len))] : []),
      ...truthBadge(s.replicas || []),
      ...(s.engines ? [badge('tools', 'tools', s.engines.auto_tool_choice ? s.engines.tool_call_parser : 'off',
        s.engines.auto_tool_choice ? 'on' : 'off')] : []),
    );
    $('model').textContent = s.model || '';
  }

  // row appends one table row of cells [class, text].
  function row(parent, id, cells) {
    const tr = el('tr');
    if (id) tr.id = id;
    for (const [cls, text] of cells) tr.append(el('td', text, cls));
    parent.append(tr);
    return tr;
  }

  // The host KV tier (vLLM KV offloading): its columns show only when a
  // replica has one (Status.HasOffload in types.go).
  const hasTier = (r) => !!(r.offload_backend || r.offload_bytes > 0);
  const anyTier = (s) => (s.replicas || []).some(hasTier);
  const tierSize = (r) => (r.offload_bytes > 0 ? fmt.bytes(r.offload_bytes) : hasTier(r) ? 'on' : '-');

  // A replica on another host (a box of a farm behind route or epp) shows
  // host:port, as `warden status` does: boxes often share a port.
  const endpoint = (r) => {
    try {
      const h = new URL(r.url).hostname;
      if (h && h !== 'localhost' && !h.startsWith('127.') && h !== '[::1]') return h + ':' + r.port;
    } catch (e) { /* no URL: the port alone */ }
    return String(r.port);
  };

  function replicaCells(r, tier) {
    return [
      ['rank', String(r.rank)], ['gpus', (!(r.gpus && r.gpus.length) && r.dp_rank != null) ? 'dp ' + r.dp_rank : fmt.gpus(r.gpus)], ['port', endpoint(r)],
      ['up ' + (r.up ? 'is-up' : 'is-down'), fmt.up(r)], ['inflight', String(r.in_flight)],
      ['sticky', String(r.sticky)], ['spilled', String(r.spilled_in)], ['pinned', String(r.pinned)],
      ['running', fmt.num(r.running)], ['waiting', fmt.num(r.waiting)], ['kv', fmt.pct(r.kv_used)],
      ['kvcap', fmt.tokens(r.kv_capacity_tokens)], ['hit', fmt.pct(r.hit_rate)],
      ...(tier ? [['offload', tierSize(r)], ['offload-hit', hasTier(r) ? fmt.pct(r.offload_hit_rate || 0) : '-']] : []),
      ['sessions', fmt.sessions(r.active_sessions, r.active_subagents)], ['restarts', String(r.restarts)],
    ];
  }

  // offloadTotals sums the host KV tiers, as TotalsOf does.
  function offloadTotals(s) {
    const t = { n: 0, bytes: 0, q: 0, h: 0, loaded: 0, stored: 0, backend: '', filled: 0, fillSize: 0 };
    for (const r of s.replicas || []) {
      if (hasTier(r)) { t.n++; t.backend = t.backend || r.offload_backend || ''; }
      // filledOf in summary.go: the tiers whose fill is known, by size.
      if (hasTier(r) && r.offload_bytes > 0 && (r.offload_filled || 0) >= 0) {
        t.filled += (r.offload_filled || 0) * r.offload_bytes; t.fillSize += r.offload_bytes;
      }
      t.bytes += r.offload_bytes || 0; t.q += r.offload_queries || 0; t.h += r.offload_hits || 0;
      t.loaded += r.offload_loaded_bytes || 0; t.stored += r.offload_stored_bytes || 0;
    }
    return t;
  }

  function totalCells(s, tier) {
    const t = { inflight: 0, up: 0, sticky: 0, spilled: 0, pinned: 0, run: 0, wait: 0, used: 0, cap: 0, q: 0, h: 0, sess: 0, sub: 0, rst: 0 };
    const reps = s.replicas || [];
    for (const r of reps) {
      t.inflight += r.in_flight; t.up += r.up ? 1 : 0; t.sticky += r.sticky; t.spilled += r.spilled_in;
      t.pinned += r.pinned; t.run += r.running; t.wait += r.waiting; t.used += r.kv_used * r.kv_capacity_tokens;
      t.cap += r.kv_capacity_tokens; t.q += r.prefix_queries; t.h += r.prefix_hits;
      t.sess += r.active_sessions; t.sub += r.active_subagents || 0; t.rst += r.restarts;
    }
    const cap = (s.totals && s.totals.kv_capacity_tokens) || t.cap;
    const o = offloadTotals(s);
    return [
      ['rank', 'all'], ['gpus', ''], ['port', ''], ['up', t.up + '/' + reps.length], ['inflight', String(t.inflight)],
      ['sticky', String(t.sticky)], ['spilled', String(t.spilled)], ['pinned', String(t.pinned)],
      ['running', fmt.num(t.run)], ['waiting', fmt.num(t.wait)], ['kv', fmt.pct(ratio(t.used, cap))],
      ['kvcap', fmt.tokens(cap)], ['hit', fmt.pct(ratio(t.h, t.q))],
      ...(tier ? [['offload', o.bytes > 0 ? fmt.bytes(o.bytes) : 'on'], ['offload-hit', fmt.pct(ratio(o.h, o.q))]] : []),
      ['sessions', fmt.sessions(t.sess, t.sub)], ['restarts', String(t.rst)],
    ];
  }

  // offloadLine mirrors offloadLine in format.go.
  function offloadLine(s) {
    const o = offloadTotals(s);
    const size = o.bytes > 0 ? fmt.ibytes(o.bytes) : 'size unknown';
    return 'host KV tier (vLLM ' + (o.backend || 'native') + ' KV offloading): ' + size + ' on ' + o.n + ' of ' +
      (s.replicas || []).length + ' replicas; ' + fmt.tokens(o.h) + ' of ' + fmt.tokens(o.q) +
      ' prompt tokens that missed the GPU cache found there (' + fmt.pct(ratio(o.h, o.q)) + '); ' +
      fmt.ibytes(o.loaded) + ' loaded back, ' + fmt.ibytes(o.stored) + ' stored' +
      (o.fillSize > 0 ? '; filled ' + fmt.pct(o.filled / o.fillSize) + ' (stored since the engines started over the size)' : '');
  }

  function renderTable(s) {
    const body = document.querySelector('#replicas tbody');
    const foot = document.querySelector('#replicas tfoot');
    body.replaceChildren();
    foot.replaceChildren();
    const tier = anyTier(s);
    for (const th of document.querySelectorAll('#replicas th.offload')) th.hidden = !tier;
    const line = $('offload');
    line.hidden = !tier;
    line.textContent = tier ? offloadLine(s) : '';
    for (const r of s.replicas || []) {
      const tr = row(body, 'replica-' + r.rank, replicaCells(r, tier));
      const kv = tr.querySelector('td.kv');
      const p = Math.max(0, Math.min(100, r.kv_used * 100));
      kv.style.backgroundImage = 'linear-gradient(to right, #dbe6fb ' + p + '%, transparent ' + p + '%)';
      if (r.scrape_error) tr.title = 'metrics: ' + r.scrape_error;
    }
    row(foot, 'replica-totals', totalCells(s, tier));
  }

  function renderSince(s) {
    const since = s.since ? new Date(s.since) : null;
    const when = since && !isNaN(since) && since.getFullYear() > 1 ? since.toLocaleString() : 'warden start';
    $('since').textContent = 'counters since ' + when + ' (warden start, up ' + fmt.duration(s.uptime_seconds || 0) + ')';
    const w = $('warnings');
    w.replaceChildren();
    for (const r of s.replicas || []) {
      if (r.scrape_error) w.append(el('li', 'replica ' + r.rank + ' metrics: ' + r.scrape_error));
    }
    for (const m of s.warnings || []) w.append(el('li', m));
    const p = s.peak_overcommit;
    if (p && !overNow(s)) {
      const at = new Date(p.at).toLocaleTimeString();
      const mean = p.mean_context_tokens, demand = p.sessions * mean;
      w.append(el('li', 'KV cache overcommitted earlier (worst at ' + at + '): ' + p.sessions +
        ' sessions x ' + fmt.tokens(mean) + ' = ' + fmt.tokens(demand) + ' > ' + fmt.tokens(p.capacity_tokens) + ' tokens', 'peak'));
    }
  }

  // overNow mirrors Overcommit in overcommit.go: active sessions x mean
  // context above the total KV capacity (then a warning says so already).
  function overNow(s) {
    let cap = (s.totals && s.totals.kv_capacity_tokens) || 0;
    if (!cap) for (const r of s.replicas || []) cap += r.kv_capacity_tokens;
    const n = s.active_context_sessions || 0;
    const sessions = s.concurrent_sessions > 0 ? s.concurrent_sessions : s.sessions;
    if (!(sessions > 0 && n > 0 && s.active_context_tokens > 0 && cap > 0)) return false;
    return sessions * Math.floor(s.active_context_tokens / n) > cap;
  }

  // lastHour keeps the series buckets that start within the hour before
  // now. The chart spans the last hour, or less while the warden is younger
  // (at least 5 minutes), so a fresh warden's first minutes are readable.
  function lastHour(s) {
    const now = Date.parse(s.now) || Date.now();
    const from = now - HOUR * 1000;
    const pts = (s.series || []).map((p) => ({
      t: Date.parse(p.t), w: p.seconds || 1, cached: p.cached_tokens || 0,
      computed: p.computed_tokens || 0, completion: p.completion_tokens || 0,
    })).filter((p) => !isNaN(p.t) && p.t >= from && p.t <= now);
    const up = (s.uptime_seconds || 0) * 1000;
    const span = Math.max(5 * 60000, Math.min(HOUR * 1000, up > 0 ? up : HOUR * 1000));
    return { now, from, span, pts };
  }

  function renderShare(h) {
    let cached = 0, computed = 0, completion = 0, secs = 0;
    for (const p of h.pts) { cached += p.cached; computed += p.computed; completion += p.completion; secs += p.w; }
    const prompt = cached + computed;
    $('share').textContent = prompt > 0 ? fmt.pct(cached / prompt) : '–';
    $('share-detail').textContent = 'cached share of prompt tokens, last hour (' +
      fmt.tokens(cached) + ' of ' + fmt.tokens(prompt) + ')';
    const avg = (n) => (secs > 0 ? fmt.tokens(n / secs) + ' tok/s' : '–');
    $('avg-cached').textContent = avg(cached);
    $('avg-computed').textContent = avg(computed);
    $('avg-completion').textContent = avg(completion);
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // niceMax rounds a maximum up to 1, 2 or 5 times a power of ten.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // renderChart draws prompt tok/s (cached below computed, stacked) above a
  // mid line and completion tok/s mirrored below it, one step per bucket.
  function renderChart(h) {
    const W = 960, H = 340, L = 64, R = 12, T = 12, B = 26, MID = T + (H - T - B) * 0.68;
    const start = h.now - h.span;
    const x = (t) => L + ((t - start) / h.span) * (W - L - R);
    let upMax = 0, downMax = 0;
    for (const p of h.pts) {
      upMax = Math.max(upMax, (p.cached + p.computed) / p.w);
      downMax = Math.max(downMax, p.completion / p.w);
    }
    upMax = niceMax(upMax); downMax = niceMax(downMax);
    const yUp = (v) => MID - (v / upMax) * (MID - T);
    const yDown = (v) => MID + (v / downMax) * (H - B - MID);
    const paths = { cached: '', computed: '', completion: '' };
    const step = (x0, x1, ya, yb) => 'M' + x0.toFixed(1) + ' ' + ya.toFixed(1) + 'H' + x1.toFixed(1) + 'V' + yb.toFixed(1) + 'H' + x0.toFixed(1) + 'Z';
    for (const p of h.pts) {
      if (p.t + p.w * 1000 <= start) continue;
      const x0 = Math.max(x(p.t), L), x1 = Math.min(x(p.t + p.w * 1000), W - R);
      const c = p.cached / p.w, u = p.computed / p.w, o = p.completion / p.w;
      if (c > 0) paths.cached += step(x0, x1, yUp(c), MID);
      if (u > 0) paths.computed += step(x0, x1, yUp(c + u), yUp(c));
      if (o > 0) paths.completion += step(x0, x1, MID, yDown(o));
    }
    const g = [];
    for (const f of [0.5, 1]) {
      g.push(svg('line', { class: 'grid', x1: L, x2: W - R, y1: yUp(upMax * f), y2: yUp(upMax * f) }));
      g.push(svg('text', { x: L - 6, y: yUp(upMax * f) + 4, 'text-anchor': 'end' }, fmt.tokens(upMax * f) + '/s'));
    }
    g.push(svg('line', { class: 'grid', x1: L, x2: W - R, y1: yDown(downMax), y2: yDown(downMax) }));
    g.push(svg('text', { x: L - 6, y: yDown(downMax) + 4, 'text-anchor': 'end' }, fmt.tokens(downMax) + '/s'));
    const spanMin = h.span / 60000;
    const tick = [1, 2, 5, 10, 15].find((t) => spanMin / t <= 6) || 15;
    for (let m = 0; m <= spanMin + 1e-9; m += tick) {
      const xx = x(h.now - m * 60000);
      const anchor = m === 0 ? 'end' : (m + tick > spanMin + 1e-9 ? 'start' : 'middle');
      g.push(svg('text', { x: xx, y: H - 8, 'text-anchor': anchor }, m === 0 ? 'now' : '−' + m + ' min'));
    }
    for (const k of ['cached', 'computed', 'completion']) g.push(svg('path', { id: 'area-' + k, class: k, d: paths[k] }));
    g.push(svg('line', { class: 'axis', x1: L, x2: W - R, y1: MID, y2: MID }));
    g.push(svg('text', { x: L + 4, y: T + 10 }, 'prompt'));
    g.push(svg('text', { x: L + 4, y: H - B - 4 }, 'completion'));
    $('chart').replaceChildren(...g);
  }

  // truthBadge says how many replicas' KV-cache events flow (placement
  // reads what their engines hold); none when no replica has events.
  function truthBadge(reps) {
    const on = reps.filter((r) => r.kv_events);
    if (on.length === 0) return [];
    const live = on.filter((r) => r.kv_events === 'live').length;
    return [badge('truth', 'engine truth', live + '/' + reps.length + ' live', live === reps.length ? 'on' : 'off')];
  }

  // MISS_ORDER mirrors missOrder in summary.go.
  const MISS_ORDER = ['new', 'evicted', 'moved', 'restarted', 'prefix_changed', 'unknown'];

  function renderMisses(s) {
    const m = s.miss_tokens || {};
    const total = MISS_ORDER.reduce((a, k) => a + (m[k] || 0), 0);
    const p = $('misses');
    p.hidden = total === 0;
    if (total === 0) return;
    p.textContent = 'uncached prompt tokens by cause: ' + MISS_ORDER.filter((k) => m[k] > 0)
      .map((k) => k + ' ' + fmt.tokens(m[k]) + ' (' + fmt.pct(m[k] / total) + ')').join(', ');
  }

  function render(s) {
    renderBadges(s);
    renderTable(s);
    renderSince(s);
    renderMisses(s);
    const h = lastHour(s);
    renderShare(h);
    renderChart(h);
  }

  function setConn(ok, text) {
    const c = $('conn');
    c.textContent = text;
    c.className = 'conn' + (ok ? '' : ' down');
  }

  async function poll() {
    try {
      const res = await fetch('/warden/status', { cache: 'no-store' });
      if (!res.ok) throw new Error('HTTP ' + res.status);
      render(await res.json());
      setConn(true, 'live · updated ' + new Date().toLocaleTimeString());
    } catch (e) {
      setConn(false, 'warden not reachable (' + e.message + '), retrying');
    }
    setTimeout(poll, POLL_MS);
  }

  try {
    const init = JSON.parse($('initial-status').textContent || 'null');
    if (init) render(init);
  } catch (e) { /* the first poll renders */ }
  poll();
})();
