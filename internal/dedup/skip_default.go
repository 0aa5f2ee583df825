//go:build !platformd_nodedup

package dedup

// skipDedupInsert is false in every build but the bench's no-dedup one
// (build tag platformd_nodedup): the compiler drops the branches it guards,
// so a shipped binary has no way to run handlers without the dedup insert.
const skipDedupInsert = false

// SkipsDedupInsert reports whether this build runs handlers without the
// dedup insert (only a bench build with tag platformd_nodedup does).
func SkipsDedupInsert() bool { return skipDedupInsert }
