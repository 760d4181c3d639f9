// The console's own script (the CSP allows no inline one): a file chosen in an <input type="file" data-into="ID">
// is read in the browser and put into the textarea ID, so a description is "uploaded" as the form's text, with no
// multipart parsing on the server. And the try page's API key stays in this browser tab (sessionStorage, per
// workspace) from one call to the next: the server never writes a key back into a page.
document.addEventListener("change", (event) => {
  const input = event.target;
  if (!(input instanceof HTMLInputElement) || input.type !== "file" || !input.dataset.into) return;
  const target = document.getElementById(input.dataset.into);
  const file = input.files && input.files[0];
  if (!target || !file) return;
  file.text().then((text) => { target.value = text; });
});

const KEPT_KEY = "crank-console-key:";

function fillKeptKeys() {
  for (const input of document.querySelectorAll("input[data-keep-key]")) {
    const kept = sessionStorage.getItem(KEPT_KEY + input.dataset.keepKey);
    if (kept && !input.value) input.value = kept;
  }
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fillKeptKeys);
else fillKeptKeys();

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement)) return;
  for (const input of form.querySelectorAll("input[data-keep-key]")) {
    if (input.value) sessionStorage.setItem(KEPT_KEY + input.dataset.keepKey, input.value);
  }
});
