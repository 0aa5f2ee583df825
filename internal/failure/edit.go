package failure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/wI2L/jsondiff"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/state"
)

// EditBody sets a failure's edited body, by actor for reason, and returns
// the failure as it now is. payload is JSON text and must be an object:
// with an "event_id" member it is the whole new body (an envelope); else
// it replaces the "payload" member of the body as it is (the edited body
// if any, else the original), whose other members are kept byte for byte.
// The new body's event_id must be the failure's (when it has one); a
// resolved or discarded failure refuses edits (ErrPrecondition). The
// original body never changes; the edit is recorded in
// platform.failed_event_edit, with the JSON Patch (RFC 6902) from the
// body before to the body after, and audited (state.AuditFailureEdit), in
// one transaction. Safe for concurrent use: the row is locked while it is
// edited.
func (s *Store) EditBody(ctx context.Context, id uuid.UUID, payload []byte, reason, actor string) (Failure, error) {
	obj, err := jsonObject(payload)
	if err != nil {
		return Failure{}, fmt.Errorf("%w: payload: %w", ErrInvalid, err)
	}
	_, whole := obj["event_id"]
	out, err := dbutil.WithTxV(ctx, s.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (Failure, error) {
		r, found, err := byIDForUpdate.Find(ctx, tx, id)
		switch {
		case err != nil:
			return Failure{}, err
		case !found:
			return Failure{}, fmt.Errorf("%w: failure %s", ErrNotFound, id)
		case r.State == StateResolved || r.State == StateDiscarded:
			return Failure{}, fmt.Errorf("%w: failure %s is %s", ErrPrecondition, id, r.State)
		}
		before := r.SendBody()
		after := bytes.TrimSpace(payload)
		if !whole {
			after, err = replaceMember(before, "payload", after)
			if err != nil {
				return Failure{}, fmt.Errorf("%w: payload: the failure's body is not a JSON object (%w): send the whole envelope, event_id included", ErrInvalid, err)
			}
		}
		if err := sameEventID(after, r.EventID); err != nil {
			return Failure{}, err
		}
		diff, err := patch(before, after)
		if err != nil {
			return Failure{}, err
		}
		p := editParams{ID: id, By: actor, Reason: reason, BodyBefore: before, BodyAfter: after, Diff: diff}
		if _, err := setEditedBody.Run(ctx, tx, p); err != nil {
			return Failure{}, err
		}
		if _, err := insertEdit.Run(ctx, tx, p); err != nil {
			return Failure{}, err
		}
		detail := map[string]any{"failure": id.String(), "reason": reason, "diff": json.RawMessage(diff)}
		if err := state.AppendAudit(ctx, tx, actor, state.AuditFailureEdit, r.Pool, detail); err != nil {
			return Failure{}, err
		}
		r, err = byID.One(ctx, tx, id)
		if err != nil {
			return Failure{}, err
		}
		return r.failure(), nil
	})
	if err != nil {
		return Failure{}, fmt.Errorf("failure: edit %s: %w", id, err)
	}
	return out, nil
}

// jsonObject decodes b, which must be one JSON object and nothing after
// it, into its members.
func jsonObject(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if obj == nil {
		return nil, errors.New("not a JSON object: null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not a JSON object: data after the object")
	}
	return obj, nil
}

// replaceMember returns the JSON object doc with its top-level member name
// set to value, every other byte of doc kept: the value's bytes are
// replaced where they are, or the member is added at the end.
func replaceMember(doc []byte, name string, value []byte) ([]byte, error) {
	if _, err := jsonObject(doc); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		afterKey := int(dec.InputOffset())
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if key != name {
			continue
		}
		end := int(dec.InputOffset())
		// The value starts after the colon and any space.
		start := afterKey + bytes.IndexByte(doc[afterKey:], ':') + 1
		for start < end && isSpace(doc[start]) {
			start++
		}
		out := make([]byte, 0, len(doc)-(end-start)+len(value))
		out = append(out, doc[:start]...)
		out = append(out, value...)
		return append(out, doc[end:]...), nil
	}
	// No such member: added before the closing brace.
	closing := bytes.LastIndexByte(doc, '}')
	inner := bytes.TrimSpace(doc[bytes.IndexByte(doc, '{')+1 : closing])
	key, _ := json.Marshal(name)
	out := make([]byte, 0, len(doc)+len(key)+len(value)+2)
	out = append(out, doc[:closing]...)
	out = bytes.TrimRight(out, " \t\r\n")
	if len(inner) > 0 {
		out = append(out, ',')
	}
	out = append(out, key...)
	out = append(out, ':')
	out = append(out, value...)
	return append(out, doc[closing:]...), nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// sameEventID checks that body's event_id is want (when want is set).
func sameEventID(body []byte, want uuid.UUID) error {
	if want == uuid.Nil {
		return nil
	}
	obj, err := jsonObject(body)
	if err != nil {
		return fmt.Errorf("%w: payload: %w", ErrInvalid, err)
	}
	var s string
	if err := json.Unmarshal(obj["event_id"], &s); err != nil {
		return fmt.Errorf("%w: payload.event_id: must be the failure's event id %s", ErrInvalid, want)
	}
	got, err := uuid.Parse(s)
	if err != nil || got != want {
		return fmt.Errorf("%w: payload.event_id: %q is not the failure's event id %s", ErrInvalid, s, want)
	}
	return nil
}

// patch returns the JSON Patch (RFC 6902) from before to after. A body
// that was not JSON (a failure that did not decode) is replaced whole.
func patch(before, after []byte) ([]byte, error) {
	if !json.Valid(before) {
		return json.Marshal([]map[string]any{{"op": "replace", "path": "", "value": json.RawMessage(after)}})
	}
	p, err := jsondiff.CompareJSON(before, after)
	if err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	if p == nil {
		return []byte("[]"), nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	return b, nil
}
