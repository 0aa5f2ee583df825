<?php
// billing.open_invoice as a remote handler (docs/remote-handlers.md):
// platformd POSTs the batch's new events; this answers, per event, the
// effects to apply (statements named in platformd.yaml) and the messages
// to publish. It writes nothing to the database itself: platformd applies
// the effects in the transaction that records the events as processed,
// so a duplicate never reaches this code.
//
//   PHP_CLI_SERVER_WORKERS=4 php -S 127.0.0.1:8090 handler.php
//
// BILLING_LOG, when set, is a file each event asked about is appended to
// ("<event_id> <attempt> <unix time>"), for the example's test.

$req = json_decode(file_get_contents('php://input'), true, 512, JSON_BIGINT_AS_STRING);
if (!is_array($req) || !isset($req['events'])) {
    http_response_code(400);
    exit;
}
$log = getenv('BILLING_LOG');
$results = [];
foreach ($req['events'] as $ev) {
    if ($log) {
        file_put_contents($log, $ev['event_id'] . ' ' . $ev['attempt'] . ' ' . microtime(true) . "\n", FILE_APPEND | LOCK_EX);
    }
    $order = $ev['payload'];
    $quantities = array_map(fn ($l) => $l['quantity'] ?? null, $order['lines'] ?? []);
    if (empty($order['order_id']) || empty($order['customer_id']) || !$quantities) {
        $results[] = ['event_id' => $ev['event_id'], 'error' => 'order_id, customer_id and at least one line are required', 'permanent' => true];
        continue;
    }
    foreach ($quantities as $q) {
        if (!is_string($q) || !is_numeric($q) || $q <= 0) {
            $results[] = ['event_id' => $ev['event_id'], 'error' => 'quantity must be a positive decimal string', 'permanent' => true];
            continue 2;
        }
    }
    $results[] = [
        'event_id' => $ev['event_id'],
        'effects' => [[
            'statement' => 'open_invoice',
            // Strings stay strings: "2.000" reaches PostgreSQL as written.
            'args' => ['order_id' => $order['order_id'], 'customer_id' => $order['customer_id'],
                       'lines' => count($quantities), 'quantities' => $quantities],
        ]],
        'publish' => [[
            'event_name' => 'billing.invoice.opened.v1',
            'payload' => ['order_id' => $order['order_id'], 'lines' => count($quantities)],
        ]],
    ];
}
header('Content-Type: application/json');
echo json_encode(['results' => $results], JSON_UNESCAPED_SLASHES);
