package config

// processed_event layouts (services[].processed_event.partitions).
const (
	// PartitionsNone keeps processed_event one plain table, the contract's
	// shape (docs/contracts.md, "Tables"): purged by chunked DELETE on processed_at.
	PartitionsNone = ""
	// PartitionsDaily range-partitions processed_event on event_id by the
	// UUID v7 time, one partition per UTC day, purged by dropping whole
	// partitions (opt-in).
	PartitionsDaily = "daily"

	// PartitionsAheadDefault is the default processed_event.ahead: the days
	// of partitions kept created after today's.
	PartitionsAheadDefault = 3
	partitionsAheadMax     = 60
)

// ProcessedEventConfig shapes a service's processed_event table. The table
// in the database is what counts at run time (the purge and the dedup step
// read its shape from the catalog); migrate and run check that it matches
// this block, and `platformd migrate -processed-event` converts it.
type ProcessedEventConfig struct {
	// Partitions is PartitionsNone (default: the contract's plain table)
	// or PartitionsDaily. A partitioned table accepts UUID v7 ids only,
	// within its partitions: an id outside every partition is refused by
	// the database and goes to the failure queue (beyond_horizon when
	// older than the oldest partition, permanent when not a v7 id).
	Partitions string `yaml:"partitions"`
	// Ahead is how many days of partitions are kept created after today's
	// (default 3, 1 to 60), by migrate and by every purge run. Only with
	// partitions (0 without).
	Ahead int `yaml:"ahead"`
}

// Partitioned reports whether the block asks for a partitioned table.
func (p ProcessedEventConfig) Partitioned() bool { return p.Partitions != PartitionsNone }

// processedEvent validates a service's processed_event block and applies
// its defaults.
func (v *validator) processedEvent(i int, s *ServiceConfig) {
	sp := servicePath(i) + ".processed_event"
	pe := &s.ProcessedEvent
	oneOf(v.ps, sp+".partitions", pe.Partitions, PartitionsNone, PartitionsDaily)
	switch {
	case !pe.Partitioned() && v.isSet(sp+".ahead"):
		v.ps.add(sp+".ahead", "only with partitions (set partitions: daily, or remove ahead)")
	case !pe.Partitioned():
	case !v.isSet(sp + ".ahead"):
		pe.Ahead = PartitionsAheadDefault
	case pe.Ahead < 1 || pe.Ahead > partitionsAheadMax:
		v.ps.add(sp+".ahead", "must be between 1 and %d days (got %d)", partitionsAheadMax, pe.Ahead)
	}
}
