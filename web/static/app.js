// Small helpers for server-rendered pages: live board and task refresh, block editing, confirmations,
// the browser's time zone for the sign-in form, and the header's language switch.
"use strict";

// A page part that follows the server (the board, a task): its fragment is fetched again every 2 s while its
// root says data-live="true", never while the editor plays a narration or types in it.
function pollLive(part) {
  const url = part.dataset.liveUrl;
  const busy = () => {
    const playing = [...part.querySelectorAll("audio")].some((a) => !a.paused);
    const active = document.activeElement;
    const typing = part.contains(active) && /INPUT|TEXTAREA|SELECT/.test(active.tagName);
    const ticked = [...part.querySelectorAll('input[type="checkbox"]')].some((box) => box.checked);
    return playing || typing || ticked;
  };
  const tick = async () => {
    const state = part.querySelector("[data-live]");
    if (!state || state.dataset.live !== "true") return;
    if (!busy()) {
      try {
        const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
        if (response.ok) {
          // a receipt or a detail the editor opened stays open
          const open = [...part.querySelectorAll("details")].map((d) => d.open);
          part.innerHTML = await response.text();
          part.querySelectorAll("details").forEach((d, i) => { if (open[i]) d.open = true; });
        }
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
  document.querySelectorAll("[data-live-url]").forEach(pollLive);
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
