// Tollgate console: progressive enhancement only. Every form works
// without this script; with it, destructive forms ask in a dialog instead
// of on a confirmation page, secrets get a copy button, and rule forms
// show only the fields of the chosen algorithm.
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  // Confirmation: a form with data-confirm asks first, then says so to
  // the server (confirmed=yes), which otherwise shows its own page.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      if (!window.confirm(form.getAttribute("data-confirm"))) {
        ev.preventDefault();
        return;
      }
      var input = form.querySelector('input[name="confirmed"]');
      if (!input) {
        input = document.createElement("input");
        input.type = "hidden";
        input.name = "confirmed";
        form.appendChild(input);
      }
      input.value = "yes";
    });
  });

  // Copy buttons: data-copy names the element whose text to copy.
  document.querySelectorAll("[data-copy]").forEach(function (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      var source = document.getElementById(button.getAttribute("data-copy"));
      if (!source || !navigator.clipboard) {
        return;
      }
      navigator.clipboard.writeText(source.textContent.trim()).then(function () {
        var label = button.textContent;
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = label; }, 1500);
      });
    });
  });

  // Rule forms: fields marked data-algorithms="gcra token_bucket" show
  // only for those algorithms; data-leaky="shape" only for a shaping
  // leaky bucket.
  document.querySelectorAll("[data-rule]").forEach(function (rule) {
    var algorithm = rule.querySelector("select[data-algorithm]");
    if (!algorithm) {
      return;
    }
    var update = function () {
      rule.querySelectorAll("[data-algorithms]").forEach(function (field) {
        var list = field.getAttribute("data-algorithms").split(" ");
        field.hidden = list.indexOf(algorithm.value) < 0;
      });
    };
    algorithm.addEventListener("change", update);
    update();
  });

  // User forms: the tenant matters for tenant roles only.
  document.querySelectorAll("select[data-role]").forEach(function (role) {
    var form = role.form;
    var update = function () {
      form.querySelectorAll("[data-tenant-only]").forEach(function (field) {
        field.hidden = role.value === "operator";
      });
    };
    role.addEventListener("change", update);
    update();
  });
});
