// Package web holds the web console's templates and static files,
// embedded in the admin binary: html/template pages under templates/ and
// the stylesheet and the one small script under static/. No build step,
// no CDN. The handlers are in internal/ui.
package web

import "embed"

// Templates holds templates/: layout.html, the partials (partials/*.html)
// and one file per page.
//
//go:embed templates
var Templates embed.FS

// Static holds static/: console.css and console.js.
//
//go:embed static
var Static embed.FS
