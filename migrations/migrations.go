// Package migrations embeds the SQL migrations platformd applies to every
// service database: processed_event and the platform schema. Handlers'
// migrations come from their consumer.Registration.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed platform/*.sql
var files embed.FS

// Platform returns the platform's goose migrations (files at the FS root).
func Platform() fs.FS {
	sub, err := fs.Sub(files, "platform")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder
	}
	return sub
}
