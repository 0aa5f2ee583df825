package dedup

// NextChunkSize exposes nextChunkSize to the tests.
var NextChunkSize = nextChunkSize
