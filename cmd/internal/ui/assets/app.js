// turnlog ui: the Sessions list and a Session's page. Everything the
// server sends is put into the page as text (textContent), never as HTML.
"use strict";

const token = document.querySelector('meta[name="turnlog-token"]').content;
const defaultNamespace = document.querySelector('meta[name="turnlog-namespace"]').content;
const main = document.getElementById("main");

// el makes an element: attrs sets attributes (class, href, data-*), the
// children are elements or strings (as text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function sessionHref(ns, name) {
  return "/s/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name);
}

function setCrumbs(...parts) {
  document.getElementById("crumbs").replaceChildren(...parts.flatMap((p) => [" / ", p]));
}

function setLive(on, text) {
  const live = document.getElementById("live");
  live.className = on ? "live on" : "live";
  live.textContent = text;
}

// watchSessions follows the Sessions of a namespace ("" for all) over
// Server-Sent Events; filters (name, label, ready, degraded, refused,
// text) narrow them on the server.
function watchSessions(ns, handlers, filters) {
  const q = new URLSearchParams(filters || {});
  q.set("namespace", ns);
  const src = new EventSource("/api/sessions/watch?" + q.toString());
  src.onopen = () => setLive(true, "live");
  src.onerror = () => setLive(false, "reconnecting…");
  for (const [name, fn] of Object.entries(handlers)) {
    src.addEventListener(name, (ev) => fn(JSON.parse(ev.data)));
  }
  return src;
}

function readyCell(s) {
  const text = s.ready === "True" ? "True" : s.ready + (s.reason ? " (" + s.reason + ")" : "");
  return el("td", { class: "ready ready-" + s.ready, title: s.message || "" }, text);
}

// causesText is a Session's degraded messages by cause, and with
// refused its count of refused blocks.
function causesText(s, refused) {
  const parts = (s.causes || []).map((c) => c.cause + ":" + c.seqs.join(","));
  if (s.moreDegraded > 0) parts.push("(+" + s.moreDegraded + " more)");
  if (refused && s.refused > 0) parts.push("refused:" + s.refused);
  return parts.length ? parts.join(" ") : "-";
}

function opt(v) {
  return v === undefined || v === null ? "-" : String(v);
}

// ---- the Sessions list ----

// listFilters are the filters of the Sessions list, as the page's query
// and the stream's take them.
const listFilters = ["name", "label", "ready", "degraded", "refused", "text"];

function sessionsPage() {
  const params = new URLSearchParams(location.search);
  const all = params.get("all") === "1";
  const ns = params.get("namespace") || defaultNamespace;
  const filters = {};
  for (const f of listFilters) if (params.get(f)) filters[f] = params.get(f);
  setCrumbs("Sessions");
  const status = el("p", { id: "stream-error", class: "error", hidden: true });
  const scopeNote = el("p", { id: "scope-note", class: "note", hidden: true });
  const searchNote = el("p", { id: "search-note", class: "muted", hidden: true });
  const tbody = el("tbody");
  const searching = !!filters.text;
  const where = all ? "in any namespace you may list" : "in namespace " + ns;
  const empty = el("p", { class: "muted", id: "no-sessions", hidden: true },
    Object.keys(filters).length ? "No Sessions " + where + " match the filters." : "No Sessions " + where + ".");
  const heads = ["Namespace", "Name", "Ready", "Head", "Turns", "Context", "Degraded", "Causes", "Forked from"].concat(searching ? ["Last user message"] : []);
  main.replaceChildren(
    el("h2", {}, "Sessions"),
    ...filterBar(all, ns, filters),
    scopeNote, status, searchNote,
    el("table", { id: "sessions" }, el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))), tbody),
    empty);
  const rows = new Map();
  const redraw = () => {
    const keys = [...rows.keys()].sort();
    tbody.replaceChildren(...keys.map((k) => rows.get(k)));
    empty.hidden = keys.length > 0;
  };
  const src = watchSessions(all ? "" : ns, {
    scope: (sc) => { scopeNote.hidden = !sc.note; scopeNote.textContent = sc.note || ""; },
    snapshot: (list) => {
      status.hidden = true;
      rows.clear();
      for (const s of list) rows.set(s.namespace + "/" + s.name, sessionRow(s, searching));
      redraw();
    },
    search: (r) => {
      const parts = ["Searched the last user message of " + r.searched + (r.searched === 1 ? " Session." : " Sessions.")];
      if (r.unsearched) parts.push(r.unsearched + " not searched: a list reads at most " + r.maxReads + " logs — narrow it by namespace, name or label first.");
      if (r.failed) parts.push(r.failed + " could not be read (" + r.error + ").");
      searchNote.hidden = false;
      searchNote.textContent = parts.join(" ");
    },
    upsert: (s) => { rows.set(s.namespace + "/" + s.name, sessionRow(s, searching)); redraw(); },
    delete: (s) => { rows.delete(s.namespace + "/" + s.name); redraw(); },
    error: (e) => { status.hidden = false; status.textContent = e.error; },
    invalid: (e) => { src.close(); setLive(false, ""); status.hidden = false; status.textContent = e.error; },
  }, filters);
}

// filterBar is the namespace and the filters of the Sessions list; a
// change loads the list again with them in its query.
function filterBar(all, ns, filters) {
  const nsInput = el("input", { type: "text", id: "namespace", value: ns, "aria-label": "namespace", disabled: all });
  const allBox = el("input", { type: "checkbox", id: "all-namespaces", checked: all });
  const fields = {
    name: el("input", { type: "text", id: "filter-name", value: filters.name || "", placeholder: "part of the name", size: 14 }),
    label: el("input", { type: "text", id: "filter-label", value: filters.label || "", placeholder: "key=value", size: 14 }),
    ready: el("select", { id: "filter-ready" }, ["", "True", "False", "Unknown"].map((v) =>
      el("option", { value: v, selected: (filters.ready || "") === v }, v || "any"))),
    degraded: el("input", { type: "checkbox", id: "filter-degraded", checked: !!filters.degraded }),
    refused: el("input", { type: "checkbox", id: "filter-refused", checked: !!filters.refused }),
    text: el("input", { type: "search", id: "filter-text", value: filters.text || "", placeholder: "words of the last user message", size: 28 }),
  };
  const apply = () => {
    const q = new URLSearchParams();
    if (allBox.checked) q.set("all", "1");
    else q.set("namespace", nsInput.value.trim());
    for (const [f, input] of Object.entries(fields)) {
      const v = input.type === "checkbox" ? (input.checked ? "1" : "") : input.value.trim();
      if (v) q.set(f, v);
    }
    location.search = q.toString();
  };
  for (const input of [nsInput, allBox, ...Object.values(fields)]) input.addEventListener("change", apply);
  const unfiltered = "?" + new URLSearchParams(all ? { all: "1" } : { namespace: ns }).toString();
  return [
    el("div", { class: "filter" }, el("label", {}, "Namespace ", nsInput), el("label", {}, allBox, " all namespaces")),
    el("div", { class: "filter", id: "filters" },
      el("label", {}, "Name ", fields.name), el("label", {}, "Label ", fields.label), el("label", {}, "Ready ", fields.ready),
      el("label", {}, fields.degraded, " degraded"), el("label", {}, fields.refused, " refused"),
      el("label", {}, "Last user message ", fields.text),
      Object.keys(filters).length ? el("a", { href: unfiltered, id: "clear-filters" }, "clear") : null),
  ];
}

// sessionRow is a Session's row in the list; searching: with its last
// user message.
function sessionRow(s, searching) {
  const from = s.forkedFrom
    ? el("a", { href: sessionHref(s.namespace, s.forkedFrom.session) }, s.forkedFrom.session + " @ " + s.forkedFrom.cutSeq)
    : "-";
  const labels = Object.entries(s.labels || {}).map(([k, v]) => el("span", { class: "label" }, k + "=" + v));
  return el("tr", { "data-session": s.namespace + "/" + s.name },
    el("td", {}, s.namespace),
    el("td", {}, el("a", { href: sessionHref(s.namespace, s.name), class: "session-link" }, s.name), labels.length ? el("div", { class: "labels" }, labels) : null),
    readyCell(s),
    el("td", { class: "head" }, opt(s.head)),
    el("td", { class: "turns" }, String(s.turns)),
    el("td", { class: "context" }, opt(s.context)),
    el("td", { class: "degraded" }, String(s.degraded)),
    el("td", { class: "causes" }, causesText(s, true)),
    el("td", { class: "forked-from" }, from),
    searching ? el("td", { class: "last-user" }, s.lastUser || "") : null);
}

// ---- a Session ----

// forkStatus keeps each fork action's status by the position it forks,
// so that an entry drawn again keeps what the person started.
const forkStatus = new Map();

// windowTurns is how many turns the page reads at a time: the last ones
// first, then as many earlier ones each time it is scrolled to the top.
const windowTurns = 50;

// getJSON returns an answer of the API, or throws its one-line error.
async function getJSON(url) {
  let res, body;
  try {
    res = await fetch(url);
    body = await res.text();
  } catch (e) {
    throw new Error("turnlog ui cannot be reached: " + e.message);
  }
  if (!res.ok) throw new Error(errorText(body, res));
  return JSON.parse(body);
}

function errorText(body, res) {
  try {
    const e = JSON.parse(body);
    if (e.error) return e.error;
  } catch (_) { /* not JSON */ }
  return res.status + " " + res.statusText;
}

// statusKey is what of a Session's status says its conversation changed.
function statusKey(s) {
  return JSON.stringify([s.head, s.turns, s.throughSeq, s.context, s.degraded, s.refused, s.dropped]);
}

async function sessionPage(ns, name) {
  setCrumbs(el("a", { href: "/?namespace=" + encodeURIComponent(ns) }, ns), name);
  document.title = name + " — turnlog";
  const api = "/api/sessions/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name);
  let meta, last;
  try {
    [meta, last] = await Promise.all([getJSON(api), getJSON(api + "/turns?limit=" + windowTurns)]);
  } catch (e) {
    main.replaceChildren(el("p", { class: "error", id: "page-error" }, e.message));
    return;
  }
  const panels = sessionPanels(ns);
  const conv = new Conversation(ns, meta.session, api);
  panels.show(meta);
  main.replaceChildren(panels.layout(conv.element()));
  conv.show(last);
  conv.applyEvents(meta.events);
  conv.follow();
  let seen = statusKey(meta.session);
  let timer = null, conversationChanged = false;
  const refresh = (changed) => {
    conversationChanged = conversationChanged || changed;
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const again = conversationChanged;
      conversationChanged = false;
      try {
        meta = await getJSON(api);
      } catch (e) {
        panels.error(e.message);
        return;
      }
      panels.show(meta);
      conv.applyEvents(meta.events);
      if (again) conv.update();
    }, 400);
  };
  watchSessions(ns, {
    snapshot: (list) => {
      const s = list.find((x) => x.name === name);
      const key = s ? statusKey(s) : "";
      refresh(key !== seen);
      seen = key;
    },
    upsert: (s) => {
      if (s.name === name) {
        const key = statusKey(s);
        refresh(key !== seen);
        seen = key;
      } else if (s.forkedFrom && s.forkedFrom.session === name) {
        refresh(false);
      }
    },
    delete: () => refresh(false),
  });
}

// sessionPanels are the parts of a Session's page around its
// conversation, drawn again from each answer of the API.
function sessionPanels(ns) {
  const summary = el("section", { class: "panel", id: "summary" });
  const events = el("section", { class: "panel", id: "events" });
  const tree = el("section", { class: "panel", id: "tree" });
  const forks = el("section", { class: "panel", id: "forks" });
  const problem = el("p", { class: "error", id: "page-error", hidden: true });
  const picker = new TreePicker(ns);
  return {
    layout: (conversation) => el("div", { class: "layout" },
      el("div", {}, problem, summary, el("section", { id: "conversation" }, el("h3", {}, "Conversation"), conversation), events),
      el("div", {}, tree, forks)),
    show: (page) => {
      problem.hidden = true;
      summary.replaceChildren(el("h2", {}, page.session.name), renderSummary(ns, page.session));
      events.replaceChildren(el("h3", {}, "Events"), renderEvents(page));
      // Two Sessions of the tree or more can be compared.
      const pick = treeSize(page.tree) > 1 ? picker : null;
      tree.replaceChildren(el("h3", {}, "Fork tree"), el("ul", { class: "tree" }, renderTree(ns, page.tree, pick)), pick ? pick.element() : null);
      forks.replaceChildren(el("h3", {}, "SessionForks"), renderForks(ns, page.forks));
    },
    error: (message) => {
      problem.hidden = false;
      problem.textContent = message;
    },
  };
}

function renderSummary(ns, s) {
  return el("dl", { class: "summary" },
    el("dt", {}, "Ready"), el("dd", { class: "ready-" + s.ready, id: "ready" }, s.ready + (s.reason ? " (" + s.reason + ")" : "")),
    s.message ? [el("dt", {}, "Why"), el("dd", {}, s.message)] : null,
    el("dt", {}, "Head"), el("dd", {}, opt(s.head)),
    el("dt", {}, "Turns"), el("dd", {}, String(s.turns)),
    el("dt", {}, "Context"), el("dd", {}, opt(s.context) + " messages"),
    el("dt", {}, "Degraded"), el("dd", {}, String(s.degraded) + (s.degraded ? " — " + causesText(s) : "")),
    s.refused ? [el("dt", {}, "Refused"), el("dd", { id: "refused" }, s.refused + (s.refused === 1 ? " thinking block" : " thinking blocks") + " the provider refused — " +
      (s.dropped ? s.dropped + " left out of the transcript" : "sent again, as pi does"))] : null,
    s.adapter ? [el("dt", {}, "Adapter"), el("dd", {}, s.adapter)] : null,
    s.forkedFrom ? [el("dt", {}, "Forked from"),
      el("dd", {}, el("a", { href: sessionHref(ns, s.forkedFrom.session) }, s.forkedFrom.session),
        " at seq " + s.forkedFrom.anchorSeq + ", cut " + s.forkedFrom.cutSeq + " — ",
        el("a", { href: compareHref(ns, s.forkedFrom.session, ns, s.name), id: "compare-parent" }, "compare with it"))] : null);
}

// inView reports whether an element is (partly) in the window.
function inView(node) {
  const r = node.getBoundingClientRect();
  return !node.hidden && r.bottom > 0 && r.top < window.innerHeight;
}

// Conversation is the page's window on a Session's conversation: a run of
// turns that grows at the top as the page is scrolled up (?before=) and
// at the bottom as the log grows (?from=); the API's cursors say where
// the next window starts. Marks are what the server knows of messages
// outside a window (a refusal reported later, an Event's words); they are
// kept until the message is shown.
class Conversation {
  constructor(ns, session, api) {
    this.ns = ns;
    this.session = session;
    this.api = api + "/turns";
    this.turns = el("div", { id: "turns" });
    this.note = el("p", { class: "muted", id: "conversation-note", hidden: true });
    this.moreButton = el("button", { type: "button", class: "more", id: "load-earlier" }, "Load earlier turns");
    this.moreStatus = el("span", { class: "muted", role: "status" });
    this.more = el("div", { class: "earlier", id: "earlier", hidden: true }, this.moreButton, " ", this.moreStatus);
    this.moreButton.addEventListener("click", () => this.loadEarlier());
    this.entries = new Map(); // seq -> [{entry, node}]
    this.marks = new Map(); // seq -> mark
    this.earlier = "";
    this.refresh = "";
    this.epoch = undefined;
    this.loading = false;
    this.updating = false;
  }

  element() {
    return [
      el("p", { class: "muted" },
        "Fork name ", el("input", { type: "text", id: "fork-name", placeholder: this.session.name + "-fork-…", "aria-label": "name of the next fork" }),
        " — empty: the API server picks one. Every message can be forked; a fork's child ends with the message's whole turn."),
      this.note, this.more, this.turns];
  }

  // show replaces the conversation with the window c (the last turns),
  // scrolled to its end when there are turns before it.
  show(c) {
    this.turns.replaceChildren();
    this.entries.clear();
    this.marks.clear();
    this.take(c);
    this.setEarlier(c.earlier);
    this.turns.append(...c.turns.map((t) => this.renderTurn(t)));
    if (this.earlier && this.turns.lastElementChild) this.turns.lastElementChild.scrollIntoView({ block: "end" });
  }

  // follow loads earlier turns whenever the top of the conversation comes
  // into view.
  follow() {
    new IntersectionObserver((seen) => {
      if (seen.some((e) => e.isIntersecting)) this.loadEarlier();
    }).observe(this.more);
  }

  take(c) {
    this.epoch = c.epoch;
    if (c.refresh) this.refresh = c.refresh;
    this.note.hidden = !c.note;
    this.note.textContent = c.note || "";
    for (const m of c.marks || []) {
      this.marks.set(m.seq, m);
      this.applyMark(m.seq);
    }
  }

  setEarlier(cursor) {
    this.earlier = cursor || "";
    this.more.hidden = !this.earlier;
  }

  async loadEarlier() {
    if (this.loading || !this.earlier) return;
    this.loading = true;
    this.moreButton.disabled = true;
    this.moreStatus.textContent = "loading earlier turns…";
    let c;
    try {
      c = await getJSON(this.api + "?limit=" + windowTurns + "&before=" + encodeURIComponent(this.earlier));
    } catch (e) {
      this.moreStatus.textContent = e.message;
      return;
    } finally {
      this.loading = false;
      this.moreButton.disabled = false;
    }
    this.moreStatus.textContent = "";
    if (c.epoch !== this.epoch) {
      // The stored transcript was rewritten (a compaction): start over.
      await this.reload();
      return;
    }
    const anchor = this.turns.firstElementChild;
    const top = anchor ? anchor.getBoundingClientRect().top : 0;
    this.take(c);
    this.setEarlier(c.earlier);
    this.turns.prepend(...c.turns.map((t) => this.renderTurn(t)));
    // What was at the top stays where it was on the screen.
    if (anchor) window.scrollBy(0, anchor.getBoundingClientRect().top - top);
    if (inView(this.more)) this.loadEarlier();
  }

  async reload() {
    try {
      this.show(await getJSON(this.api + "?limit=" + windowTurns));
    } catch (e) {
      this.note.hidden = false;
      this.note.textContent = e.message;
    }
  }

  // update brings the turns that can have changed since the last window
  // (from its refresh cursor on): the log's new turns, messages replayed
  // since. An update asked for while one runs runs after it.
  async update() {
    if (this.updating) {
      this.again = true;
      return;
    }
    this.updating = true;
    try {
      do {
        this.again = false;
        if (!this.refresh) {
          await this.reload();
          continue;
        }
        const c = await getJSON(this.api + "?from=" + encodeURIComponent(this.refresh));
        if (c.reset || c.epoch !== this.epoch) {
          await this.reload();
          continue;
        }
        const last = this.turns.lastElementChild;
        const atEnd = !last || last.getBoundingClientRect().bottom <= window.innerHeight + 40;
        for (const section of [...this.turns.children]) {
          if (Number(section.dataset.start) >= c.from) section.remove();
        }
        this.take(c);
        this.turns.append(...c.turns.map((t) => this.renderTurn(t)));
        if (atEnd && this.earlier && this.turns.lastElementChild) this.turns.lastElementChild.scrollIntoView({ block: "end" });
      } while (this.again);
    } catch (e) {
      this.note.hidden = false;
      this.note.textContent = e.message;
    } finally {
      this.updating = false;
    }
  }

  renderTurn(t) {
    const head = t.turn === 0 ? "between turns"
      : "turn " + t.turn + (t.cutSeq >= 0 ? " — ended " + t.reason + ", turn/end at seq " + t.cutSeq : " — streaming");
    const section = el("section", { class: "turn", "data-turn": t.turn, "data-start": t.start }, el("h4", {}, head));
    let list = null;
    for (const e of t.entries) {
      if (e.kind === "frozen") {
        // Frozen partial text is never part of the transcript: it sits
        // between the transcript's lists, greyed.
        list = null;
        section.append(renderFrozen(this.ns, this.session, e));
        continue;
      }
      if (!list) {
        list = el("ol", { class: "transcript" });
        section.append(list);
      }
      const item = { entry: e, node: renderMessage(this.ns, this.session, this.marked(e)) };
      this.entries.set(e.seq, (this.entries.get(e.seq) || []).filter((x) => x.node.isConnected).concat(item));
      list.append(item.node);
    }
    return section;
  }

  // marked is a message with what the marks know of it and it does not.
  marked(e) {
    const m = this.marks.get(e.seq);
    if (!m) return e;
    const out = Object.assign({}, e);
    if (m.degraded) out.degraded = Object.assign({}, e.degraded || {}, m.degraded);
    if (m.refused && !e.refused && e.role === "assistant" && !e.synthetic) out.refused = m.refused;
    return out;
  }

  applyMark(seq) {
    for (const item of this.entries.get(seq) || []) {
      if (!item.node.isConnected) continue;
      const node = renderMessage(this.ns, this.session, this.marked(item.entry));
      item.node.replaceWith(node);
      item.node = node;
    }
  }

  // applyEvents puts the words of each ReplayDegraded Event on its
  // degraded message.
  applyEvents(events) {
    for (const ev of events || []) {
      if (ev.reason !== "ReplayDegraded" || ev.seq < 0) continue;
      const shown = (this.entries.get(ev.seq) || []).find((x) => x.node.isConnected && this.marked(x.entry).degraded);
      const m = this.marks.get(ev.seq) || { seq: ev.seq };
      if (!shown || (m.degraded && m.degraded.event === ev.message)) continue;
      m.degraded = Object.assign({}, this.marked(shown.entry).degraded, { event: ev.message });
      this.marks.set(ev.seq, m);
      this.applyMark(ev.seq);
    }
  }
}

function who(e) {
  const m = e.message || {};
  if (e.role === "user" && e.origin === "compaction") return "compaction summary";
  if (e.role === "user" && e.origin) return "inserted context (" + e.origin + ")";
  if (e.role === "system") return e.origin === "compaction" ? "system prompt after compaction" : "system prompt change";
  if (e.role === "toolResult") return "tool result" + (m.toolName ? ": " + m.toolName : "") + (e.synthetic ? " (made up: the call got none)" : "");
  return e.role;
}

function renderMessage(ns, s, e) {
  const li = messageItem(e);
  li.append(forkActions(ns, s, e));
  return li;
}

// messageItem is a transcript message with its marks: the conversation's
// and a comparison's entries alike.
function messageItem(e) {
  const m = e.message || {};
  const cls = ["message", "role-" + e.role];
  if (e.origin) cls.push("origin");
  if (e.degraded) cls.push("degraded");
  if (e.refused || e.droppedBlocks) cls.push("refused");
  if (e.role === "toolResult") cls.push("tool-result", m.isError ? "is-error" : "");
  const meta = el("div", { class: "meta" },
    el("span", { class: "who" }, who(e)),
    el("span", {}, "seq " + e.seq),
    e.replay ? el("span", { class: "badge" }, e.replay) : null,
    m.model ? el("span", {}, m.model) : null,
    e.role === "toolResult" && m.toolCallId ? el("span", {}, "for call " + m.toolCallId) : null,
    e.degraded ? el("span", { class: "badge warn" }, "degraded: " + e.degraded.cause) : null,
    e.refused || e.droppedBlocks ? el("span", { class: "badge warn" }, "refused by the provider") : null);
  const li = el("li", { class: cls.join(" ").trim(), "data-seq": e.seq }, meta, renderContent(m.content));
  if (e.role === "assistant" && m.stopReason) li.append(el("div", { class: "meta stop" }, "stop reason: " + m.stopReason));
  if (e.degraded) {
    li.append(el("div", { class: "degraded-note" },
      "Replayed provider-neutral (cause " + e.degraded.cause + "): ",
      e.degraded.event || e.degraded.detail || "its replay state could not be used.",
      e.degraded.event ? el("span", { class: "muted" }, " — ReplayDegraded Event") : null));
  }
  if (e.refused || e.droppedBlocks) {
    li.append(el("div", { class: "refused-note" },
      (e.refused || []).map((r) => el("div", {}, r)),
      e.droppedBlocks ? el("div", {}, "Left out of the transcript: block " + e.droppedBlocks.join(", ") + " (spec.adapter.refusedBlocks: Drop).") : null,
      el("span", { class: "muted" }, "ReplayStateRefused Events")));
  }
  return li;
}

function renderFrozen(ns, s, e) {
  const why = e.stopReason ? "stopped (" + e.stopReason + ")" : e.forkAt ? "stopped: its stream was cut" : "streaming";
  const node = frozenItem(e, why);
  node.append(forkActions(ns, s, e));
  return node;
}

// frozenItem is a response's frozen partial text, greyed: never part of
// the transcript. why says how the response ended.
function frozenItem(e, why) {
  const text = (e.content || []).map((b) => b.type === "text" ? b.text : b.type === "thinking" ? b.thinking : b.type === "toolCall" ? "[tool call " + b.name + "]" : "").join("\n");
  return el("div", { class: "frozen", "data-seq": e.seq, "data-fork-at": e.forkAt || null },
    el("div", { class: "meta" }, el("span", { class: "who" }, "assistant — " + why), el("span", {}, "frozen partial text, not part of the transcript"),
      e.forkAt ? el("span", {}, "node " + e.forkAt) : null),
    el("div", { class: "frozen-text" }, text));
}

function renderContent(content) {
  if (typeof content === "string") return el("div", { class: "body" }, content);
  if (!Array.isArray(content)) return el("div", { class: "body" }, content == null ? "" : JSON.stringify(content, null, 2));
  return el("div", {}, content.map((b) => {
    switch (b.type) {
      case "text": return el("div", { class: "body" }, b.text);
      case "thinking":
        return b.redacted ? el("div", { class: "muted" }, "[redacted thinking]")
          : el("details", { class: "thinking" }, el("summary", {}, "thinking"), el("div", { class: "body" }, b.thinking));
      case "toolCall": return el("div", { class: "tool-call" }, "→ " + b.name + " (" + b.id + ") " + JSON.stringify(b.arguments || {}, null, 2));
      case "image": return el("div", { class: "muted" }, "[image " + (b.mimeType || "") + "]");
      default: return el("div", { class: "body" }, JSON.stringify(b));
    }
  }));
}

function forkActions(ns, s, e) {
  const actions = el("div", { class: "actions" });
  if (!e.forkAt) {
    actions.append(el("span", { class: "muted" }, "can be forked once its turn ends"));
    return actions;
  }
  const btn = el("button", { class: "fork", type: "button", "data-fork-at": e.forkAt, title: "fork at " + e.forkAt }, "Fork here");
  let status = forkStatus.get(e.forkAt);
  if (!status) {
    status = el("span", { class: "fork-status", role: "status" });
    forkStatus.set(e.forkAt, status);
  }
  btn.addEventListener("click", () => fork(ns, s.name, e.forkAt, btn, status));
  actions.append(btn, status);
  return actions;
}

function showStatus(status, kind, ...parts) {
  status.className = "fork-status " + kind;
  status.replaceChildren(...parts);
}

async function fork(ns, source, atSeq, btn, status) {
  const name = (document.getElementById("fork-name").value || "").trim();
  btn.disabled = true;
  showStatus(status, "waiting", "creating a SessionFork at " + atSeq + "…");
  try {
    const res = await fetch("/api/sessions/" + encodeURIComponent(ns) + "/" + encodeURIComponent(source) + "/forks", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Turnlog-Token": token },
      body: JSON.stringify({ atSeq: atSeq, name: name }),
    });
    const body = await res.text();
    if (!res.ok) {
      showStatus(status, "error", errorText(body, res));
      return;
    }
    await follow(ns, JSON.parse(body).name, status);
  } catch (e) {
    showStatus(status, "error", "the fork could not be sent: " + e.message);
  } finally {
    btn.disabled = false;
  }
}

// follow shows a SessionFork's progress until its child is Ready or the
// fork has failed.
async function follow(ns, forkName, status) {
  for (;;) {
    const res = await fetch("/api/forks/" + encodeURIComponent(ns) + "/" + encodeURIComponent(forkName));
    const body = await res.text();
    if (!res.ok) {
      showStatus(status, "error", errorText(body, res));
      return;
    }
    const f = JSON.parse(body);
    if (f.phase === "Failed") {
      showStatus(status, "error", "sessionfork/" + f.name + " failed: " + f.reason + ": " + f.message);
      return;
    }
    if (f.phase === "Succeeded") {
      showStatus(status, f.childReady ? "done" : "waiting",
        "sessionfork/" + f.name + ": child ",
        el("a", { class: "child", href: sessionHref(ns, f.child) }, f.child),
        " — cut at seq " + f.cutSeq + " (turn " + f.cutTurn + ", " + f.cutReason + ")",
        f.childReady ? ", Ready" : ", replaying…");
      if (f.childReady) return;
    } else {
      showStatus(status, "waiting", "sessionfork/" + f.name + ": " + (f.reason ? f.reason + ": " + f.message : "waiting for the manager…"));
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

function renderEvents(page) {
  if (page.eventsError) return el("p", { class: "error" }, "Events cannot be listed: " + page.eventsError);
  if (!page.events.length) return el("p", { class: "muted" }, "No Events (they expire after an hour; the status keeps the counts).");
  return el("table", { class: "events" },
    el("thead", {}, el("tr", {}, ["Last seen", "Type", "Reason", "Object", "Message"].map((h) => el("th", {}, h)))),
    el("tbody", {}, page.events.map((e) => el("tr", { "data-reason": e.reason },
      el("td", {}, new Date(e.lastSeen).toLocaleTimeString()), el("td", { class: e.type }, e.type), el("td", {}, e.reason),
      el("td", {}, e.object + (e.seq >= 0 ? " (seq " + e.seq + ")" : "")), el("td", { class: "message" }, e.message)))));
}

function renderForks(ns, forks) {
  if (!forks.length) return el("p", { class: "muted" }, "No SessionForks of this Session.");
  return el("table", {},
    el("thead", {}, el("tr", {}, ["Name", "At", "Result"].map((h) => el("th", {}, h)))),
    el("tbody", {}, forks.map((f) => el("tr", { "data-fork": f.name },
      el("td", {}, f.name), el("td", {}, f.atSeq + (f.cutSeq != null ? " → cut " + f.cutSeq : "")),
      el("td", { class: f.phase === "Failed" ? "error" : "" },
        f.child ? el("a", { href: sessionHref(ns, f.child) }, f.child) : f.phase + (f.reason ? " (" + f.reason + ")" : ""))))));
}

// renderTree draws a fork tree, each Session with a box to tick for
// picker (none when picker is null).
function renderTree(ns, n, picker) {
  const label = n.missing ? el("span", { class: "name muted" }, n.name + " (gone or not readable)")
    : el("a", { href: sessionHref(ns, n.name) }, n.name);
  return el("li", { class: n.current ? "current" : null, "data-session": n.name },
    n.missing || !picker ? null : picker.box(n.name),
    label,
    n.cutSeq != null ? el("span", { class: "muted" }, " cut " + n.cutSeq) : null,
    n.ready && n.ready !== "True" ? el("span", { class: "muted" }, " (" + n.ready + ")") : null,
    n.children.length ? el("ul", {}, n.children.map((c) => renderTree(ns, c, picker))) : null);
}

// treeSize counts the Sessions of a fork tree that can be read.
function treeSize(n) {
  return (n.missing ? 0 : 1) + n.children.reduce((sum, c) => sum + treeSize(c), 0);
}

// TreePicker is the choice of two Sessions of a fork tree to compare: the
// first one ticked is A, the second B. It outlives the tree it is drawn
// in, which is drawn again as the Sessions change.
class TreePicker {
  constructor(ns) {
    this.ns = ns;
    this.picked = [];
    this.button = el("button", { type: "button", class: "more", id: "compare-picked", disabled: true }, "Compare");
    this.hint = el("span", { class: "muted", id: "compare-hint" });
    this.button.addEventListener("click", () => {
      if (this.picked.length === 2) location.href = compareHref(this.ns, this.picked[0], this.ns, this.picked[1]);
    });
    this.update();
  }

  box(name) {
    const box = el("input", { type: "checkbox", class: "pick", "data-session": name, "aria-label": "compare " + name, checked: this.picked.includes(name) });
    box.addEventListener("change", () => {
      this.picked = this.picked.filter((x) => x !== name);
      if (box.checked) this.picked.push(name);
      // A third tick replaces the oldest.
      if (this.picked.length > 2) this.picked.shift();
      for (const b of document.querySelectorAll("#tree input.pick")) b.checked = this.picked.includes(b.dataset.session);
      this.update();
    });
    return box;
  }

  update() {
    this.button.disabled = this.picked.length !== 2;
    this.hint.textContent = this.picked.length === 2 ? " " + this.picked[0] + " (A) with " + this.picked[1] + " (B)" : " tick two Sessions to compare them";
  }

  element() {
    return el("p", { class: "compare-pick" }, this.button, this.hint);
  }
}

// ---- a comparison ----

function compareHref(nsA, a, nsB, b) {
  return "/compare/" + [nsA, a, nsB, b].map(encodeURIComponent).join("/");
}

// sharedText is the shared prefix on one line, as `kubectl turnlog diff`
// prints it: "shared: seq 0–16, turns 1–3, 5 messages; cut at seq 16
// (turn 3, aborted)".
function sharedText(c) {
  const s = c.shared;
  const turns = s.turns === 1 ? "turn " + s.firstTurn : "turns " + s.firstTurn + "–" + s.lastTurn;
  const line = "shared: seq 0–" + s.cutSeq + ", " + turns + ", " + s.messages + (s.messages === 1 ? " message" : " messages");
  if (c.identical) return line + ": the two logs are the same";
  if (s.cutSeq === s.lastTurnEndSeq) return line + "; cut at seq " + s.cutSeq + " (turn " + s.lastTurn + ", " + s.lastReason + ")";
  return line + "; cut at seq " + s.cutSeq + " (after turn " + s.lastTurn + ")";
}

async function comparePage(nsA, a, nsB, b) {
  setCrumbs("Compare", nsA + "/" + a + " ↔ " + nsB + "/" + b);
  document.title = "Compare " + a + " and " + b + " — turnlog";
  const sides = el("p", { class: "sides" },
    "A: ", el("a", { href: sessionHref(nsA, a), id: "side-a" }, nsA + "/" + a),
    " · B: ", el("a", { href: sessionHref(nsB, b), id: "side-b" }, nsB + "/" + b),
    " · ", el("a", { href: compareHref(nsB, b, nsA, a), id: "swap" }, "swap"));
  let c;
  try {
    c = await getJSON("/api" + compareHref(nsA, a, nsB, b));
  } catch (e) {
    main.replaceChildren(el("h2", {}, "Compare"), sides, el("p", { class: "error", id: "page-error" }, e.message));
    return;
  }
  main.classList.add("wide");
  main.replaceChildren(...[
    el("h2", {}, "Compare"),
    sides,
    el("p", { id: "shared", class: "shared" }, sharedText(c)),
    c.identical ? null : el("table", { id: "branches", class: "branches" },
      el("thead", {}, el("tr", {}, sideHead("A", c.a), sideHead("B", c.b))),
      el("tbody", {}, c.rows.map((r, i) => el("tr", { class: "row", "data-turn": r.turn },
        compareCell("a", r.a, i === 0 && c.a.turns === 0, c.shared.cutSeq),
        compareCell("b", r.b, i === 0 && c.b.turns === 0, c.shared.cutSeq))))),
    c.moreRows ? el("p", { class: "muted", id: "more-rows" }, c.moreRows + " more turns after these: see each Session's page.") : null,
  ].filter(Boolean));
}

function sideHead(letter, side) {
  const detail = side.turns ? "head " + side.headSeq + ", replayed through " + side.throughSeq : "head " + side.headSeq;
  return el("th", { class: "side-" + letter.toLowerCase() }, letter + ": " + side.namespace + "/" + side.name, el("span", { class: "detail" }, " — " + detail));
}

// compareCell is one branch's turn in a row; ended: the branch has
// nothing after the cut.
function compareCell(side, t, ended, cut) {
  const td = el("td", { class: "side side-" + side });
  if (ended) td.append(el("p", { class: "muted nothing" }, "nothing after seq " + cut + ": its log ends there"));
  if (!t) return td;
  const title = t.turn === 0 ? "between turns, seq " + t.startSeq + "–" + t.endSeq
    : "turn " + t.turn + ", seq " + t.startSeq + (t.endSeq < 0 ? "–, open" : "–" + t.endSeq + ", " + t.reason + (t.replayed ? "" : ", not replayed yet"));
  const section = el("section", { class: "turn", "data-turn": t.turn }, el("h4", {}, title));
  let list = null;
  for (const e of t.entries) {
    if (e.kind === "frozen") {
      list = null;
      section.append(frozenItem(e, e.stopReason ? "stopped (" + e.stopReason + ")" : "stopped: its stream was cut"));
      continue;
    }
    if (!list) {
      list = el("ol", { class: "transcript" });
      section.append(list);
    }
    list.append(messageItem(e));
  }
  td.append(section);
  return td;
}

// ---- routing ----

const sessionPath = location.pathname.match(/^\/s\/([^/]+)\/([^/]+)$/);
const comparePath = location.pathname.match(/^\/compare\/([^/]+)\/([^/]+)\/([^/]+)\/([^/]+)$/);
if (sessionPath) sessionPage(decodeURIComponent(sessionPath[1]), decodeURIComponent(sessionPath[2]));
else if (comparePath) comparePage(...comparePath.slice(1).map(decodeURIComponent));
else sessionsPage();
