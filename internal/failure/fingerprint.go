package failure

import "regexp"

// The fingerprint's placeholders replace, in this order: UUIDs, quoted
// values ("..." and '...'), then numbers (with their sign, decimals and
// exponent). Two failures of one cause differ in those and nothing else.
var (
	fpUUID   = regexp.MustCompile(`(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	fpQuoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	fpNumber = regexp.MustCompile(`-?\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b`)
)

// fingerprintMax bounds what a fingerprint keeps of a long error.
const fingerprintMax = 512

// Fingerprint returns errText with its UUIDs, quoted values and numbers
// replaced by <uuid>, <q> and <n>: the cause of a failure, shared by every
// failure of that cause ("stock.reserve: product <uuid>: quantity <n> is
// negative").
func Fingerprint(errText string) string {
	s := fpUUID.ReplaceAllString(errText, "<uuid>")
	s = fpQuoted.ReplaceAllString(s, "<q>")
	s = fpNumber.ReplaceAllString(s, "<n>")
	if len(s) > fingerprintMax {
		s = s[:fingerprintMax]
	}
	return s
}
