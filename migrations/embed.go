// Package migrations holds Tollgate's schema as numbered golang-migrate SQL
// files, embedded so every binary carries the schema it expects.
package migrations

import "embed"

// FS holds the *.up.sql and *.down.sql files.
//
//go:embed *.sql
var FS embed.FS
