// The snippets' origin as the browser sees it, the copy buttons, and the quick look's scale and
// axes (its `caption`, which the server writes for people).
// No value of a store is ever written into this script: it reads the page's elements only.
document.querySelectorAll('[data-origin]').forEach(e => {
  e.textContent = e.textContent.split(e.dataset.origin).join(location.origin);
});
document.querySelectorAll('button[data-copy]').forEach(b => {
  b.addEventListener('click', () => navigator.clipboard.writeText(document.getElementById(b.dataset.copy).textContent));
});
const scale = document.getElementById('scale');
if (scale) {
  fetch('?quicklook=json').then(r => r.json()).then(q => {
    scale.textContent = q.caption;
  });
}
