//go:build platformd_nodedup

package dedup

// skipDedupInsert is true in the bench's no-dedup build (build tag
// platformd_nodedup), which measures what the dedup step costs: handlers
// run without writing processed_event, so duplicates ARE applied. Never
// ship such a build.
const skipDedupInsert = true

// SkipsDedupInsert reports whether this build runs handlers without the
// dedup insert (only a bench build with tag platformd_nodedup does).
func SkipsDedupInsert() bool { return skipDedupInsert }
