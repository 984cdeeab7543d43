// Small helpers for server-rendered pages: live board refresh, block editing, confirmations,
// the browser's time zone for the sign-in form, and the header's language switch.
"use strict";

function pollBoard(board) {
  const url = board.dataset.liveUrl;
  const busy = () => {
    // never yank a playing narration or a half-typed note from under the editor
    const playing = [...board.querySelectorAll("audio")].some((a) => !a.paused);
    const typing = board.contains(document.activeElement) && /INPUT|TEXTAREA|SELECT/.test(document.activeElement.tagName);
    return playing || typing;
  };
  const tick = async () => {
    const state = board.querySelector(".board-state");
    if (!state || state.dataset.running !== "true") return;
    if (!busy()) {
      try {
        const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
        if (response.ok) board.innerHTML = await response.text();
      } catch (e) { /* offline for a moment: try again next tick */ }
    }
    setTimeout(tick, 2000);
  };
  setTimeout(tick, 2000);
}

function nextKey(list) {
  const used = new Set([...list.querySelectorAll('input[name="block_key"]')].map((i) => i.value));
  let n = 1;
  while (used.has("b" + n)) n += 1;
  return "b" + n;
}

function setUpEditor(list) {
  const template = document.querySelector("template[data-block-template]");
  document.querySelector("[data-add-block]")?.addEventListener("click", () => {
    const row = template.content.firstElementChild.cloneNode(true);
    row.querySelector('input[name="block_key"]').value = nextKey(list);
    list.appendChild(row);
    row.querySelector("textarea").focus();
  });
  list.addEventListener("click", (event) => {
    const row = event.target.closest("[data-block]");
    if (!row) return;
    if (event.target.matches("[data-remove]")) {
      if (list.querySelectorAll("[data-block]").length > 1) row.remove();
    } else if (event.target.dataset.move === "-1" && row.previousElementSibling) {
      list.insertBefore(row, row.previousElementSibling);
    } else if (event.target.dataset.move === "1" && row.nextElementSibling) {
      list.insertBefore(row.nextElementSibling, row);
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const board = document.getElementById("board");
  if (board) pollBoard(board);
  const list = document.querySelector("[data-blocks]");
  if (list) setUpEditor(list);
  // the session keeps the time zone the browser signs in with; the header switch changes it later
  const zone = document.querySelector("input[data-browser-zone]");
  if (zone) {
    try { zone.value = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { /* left empty: UTC */ }
  }
  // the browser's own "please tick this box" would speak the browser's language, not the page's
  document.addEventListener("invalid", (event) => {
    const field = event.target;
    if (field.dataset && field.dataset.requiredMessage) field.setCustomValidity(field.dataset.requiredMessage);
  }, true);
  document.addEventListener("change", (event) => {
    if (event.target.dataset && event.target.dataset.requiredMessage) event.target.setCustomValidity("");
  });
  document.querySelectorAll("select[data-autosubmit]").forEach((select) => {
    select.addEventListener("change", () => select.form.requestSubmit());
  });
  // delegated, so forms in a refreshed board fragment ask too
  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });
});
