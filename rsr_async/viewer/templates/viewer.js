// Filters apply as soon as a value is chosen (the form still works without script).
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("select.autosubmit").forEach(function (select) {
    select.addEventListener("change", function () {
      select.form.requestSubmit();
    });
  });
  // Drop empty filters from the query so URLs stay short and shareable.
  document.querySelectorAll("form.filters").forEach(function (form) {
    form.addEventListener("submit", function () {
      form.querySelectorAll("select, input").forEach(function (field) {
        if (!field.value) { field.disabled = true; }
      });
    });
  });
});
