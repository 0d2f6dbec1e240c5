// Any script error, anywhere, is shown on the page and flagged for the browser tests.
window.addEventListener('error', function (e) {
  document.documentElement.setAttribute('data-report-error', '1');
  var box = document.getElementById('report-errors');
  if (box) { box.style.display = 'block'; box.appendChild(document.createTextNode('script error: ' + e.message + '\n')); }
});
