// Package exactly is the exactly-once checker of platformd's black-box
// tests: the chaos suite (test/chaos) and the many-tenants proofs
// (test/tenants). Once the daemons have stopped (or gone idle), a test
// reads what its services' databases (their failure stores too) hold and
// hands it to the checks here with what it sent; they count every event
// applied once, twice (or more), lost, applied wrongly, and rows nobody
// sent, and say each problem in a sentence:
//
//   - Tally: per key (an event, an order), the rows one application
//     writes against the rows found: none is lost, more is applied twice,
//     fewer or another checksum is wrong, a key nobody sent is unexpected,
//     and a key of bad input must never be applied;
//   - Final: per key, the state the last event leaves (a status and its
//     version);
//   - Recorded: a service's processed_event ids: every good event has its
//     row, no bad input has one, the purge kept the rows inside the horizon
//     and deleted those beyond it, and no other row exists;
//   - Quarantined: every bad input one row of its service's failure store
//     (platform.failed_event), state failed, with its reason, routing key
//     and body and no secret in its error; no good event and nothing
//     unknown there;
//   - Leftovers: no queue holds a message.
//
// Report.Close adds the lists of what was lost, applied twice or wrong, and
// Report.Errors fails a test with every problem. It is test support: no
// product package imports it.
package exactly
