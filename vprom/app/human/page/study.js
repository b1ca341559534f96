// The study page: one problem at a time, answers posted to `vprom human-serve`.
// The server decides each participant's problem and candidate order (so a reload resumes
// the same way) and records every answer; this page only shows and times.
"use strict";

const participant = new URLSearchParams(location.search).get("participant");
const $ = (id) => document.getElementById(id);
const RULES = {
  and: "all three pictures of a row show the same thing",
  or: "the third picture of a row shows what the first or the second shows",
  union: "every row shows the same three things, in any order",
  progression: "the numbers of things in a row go up or down by the same step",
};
let session = null, queue = [], current = null, shownAt = null, busy = false;

function show(section) {
  for (const id of ["who", "intro", "task", "done"]) $(id).hidden = id !== section;
}

function image(name) {
  const img = document.createElement("img");
  img.className = "panel";
  img.src = "images/" + name + ".jpg";
  img.alt = "";
  return img;
}

// Draw a problem into `box`: the 3x3 grid (last cell "?") and the 8 numbered candidates.
function draw(box, problem, onPick) {
  box.replaceChildren();
  const grid = document.createElement("div");
  grid.className = "grid";
  problem.context.forEach((name) => grid.append(image(name)));
  const missing = document.createElement("div");
  missing.className = "missing";
  missing.textContent = "?";
  grid.append(missing);
  const candidates = document.createElement("div");
  candidates.className = "candidates";
  problem.candidates.forEach((name, i) => {
    const button = document.createElement("button");
    button.className = "candidate";
    button.dataset.position = i;
    button.append(image(name));
    const n = document.createElement("span");
    n.className = "n";
    n.textContent = i + 1;
    button.append(n);
    if (onPick) button.addEventListener("click", () => onPick(i));
    candidates.append(button);
  });
  box.append(grid, candidates);
  return [...box.querySelectorAll("img")];
}

function progress() {
  const total = session.problems.length, done = total - queue.length;
  $("bar").style.width = (100 * done / total) + "%";
  $("progress").setAttribute("aria-valuenow", done);
  $("count").textContent = done + " / " + total;
}

function next() {
  progress();
  if (!queue.length) { show("done"); return; }
  current = queue[0];
  shownAt = null;
  const images = draw($("problem"), current, (i) => answer(i));
  // time from the moment every picture is on screen
  Promise.all(images.map((img) => img.complete ? null : new Promise((ok) => {
    img.onload = img.onerror = ok;
  }))).then(() => { if (current === queue[0]) shownAt = performance.now(); });
  $("problem").dataset.key = current.key;
  show("task");
}

async function answer(position) {
  if (busy || !current) return;
  busy = true;
  const rt = shownAt === null ? 0 : Math.round(performance.now() - shownAt);
  const body = {participant, problem: current.key, position, skipped: position === null,
                rt_ms: rt, order: current.order};
  try {
    const reply = await fetch("api/response", {method: "POST", body: JSON.stringify(body),
                                               headers: {"Content-Type": "application/json"}});
    if (reply.ok || reply.status === 409) {  // 409: already recorded (another tab)
      queue.shift();
      $("status").textContent = "";
      next();
    } else {
      $("status").textContent = "Not recorded: " + (await reply.json()).error;
    }
  } catch (e) {
    $("status").textContent = "No connection to the study server; try again.";
  } finally {
    busy = false;
  }
}

async function start() {
  if (!participant) { show("who"); return; }
  const reply = await fetch("api/session?participant=" + encodeURIComponent(participant));
  if (!reply.ok) { document.body.textContent = (await reply.json()).error; return; }
  session = await reply.json();
  const answered = new Set(session.answered);
  queue = session.problems.filter((p) => !answered.has(p.key));
  progress();
  if (answered.size) { next(); return; }  // a reload: carry on where they stopped
  const example = await (await fetch("example.json")).json();
  draw($("example"), example, null);
  $("example").querySelectorAll(".candidate")[example.answer].classList.add("right");
  const rows = example.elements;
  $("example-why").textContent = "The rows show: " + rows.slice(0, 3).join(", ") + " / " +
    rows.slice(3, 6).join(", ") + " / " + rows.slice(6, 8).join(", ") + ", ?  The rule: " +
    RULES[example.relation] + ". So the answer is candidate " + (example.answer + 1) + " (" +
    example.answer_element + "), framed in green.";
  show("intro");
}

$("who-form").addEventListener("submit", (e) => {
  e.preventDefault();
  location.search = "?participant=" + encodeURIComponent($("who-id").value);
});
$("start").addEventListener("click", next);
$("skip").addEventListener("click", () => answer(null));
document.addEventListener("keydown", (e) => {
  if ($("task").hidden || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key >= "1" && e.key <= "8") answer(Number(e.key) - 1);
  else if (e.key === "s" || e.key === "S") answer(null);
});
start();
