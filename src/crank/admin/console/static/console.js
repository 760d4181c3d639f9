// The console's own script (the CSP allows no inline one): a file chosen in an <input type="file" data-into="ID">
// is read in the browser and put into the textarea ID, so a description is "uploaded" as the form's text, with no
// multipart parsing on the server. Nothing else here.
document.addEventListener("change", (event) => {
  const input = event.target;
  if (!(input instanceof HTMLInputElement) || input.type !== "file" || !input.dataset.into) return;
  const target = document.getElementById(input.dataset.into);
  const file = input.files && input.files[0];
  if (!target || !file) return;
  file.text().then((text) => { target.value = text; });
});
