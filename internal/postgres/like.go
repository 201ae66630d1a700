package postgres

import "strings"

// likeEscaper escapes the characters LIKE and ILIKE treat specially under
// the default escape character, the backslash.
var likeEscaper = strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`)

// LikeEscape returns s with the LIKE wildcards % and _ and the escape
// character \ escaped, so that a pattern built around it (such as
// "%"+LikeEscape(s)+"%") matches s literally.
func LikeEscape(s string) string { return likeEscaper.Replace(s) }
