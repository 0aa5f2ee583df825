package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"PostgresURL", "postgres://app:s3cret@db.internal:5432/stock?sslmode=require", "postgres://app:xxxxx@db.internal:5432/stock?sslmode=require"},
		{"PostgresqlURLNoPassword", "postgresql://app@db.internal/stock", "postgresql://app@db.internal/stock"},
		{"PostgresURLNoUser", "postgres://db.internal/stock", "postgres://db.internal/stock"},
		{"PostgresURLPasswordParam", "postgres://db/stock?user=app&password=s3cret&sslmode=disable", "postgres://db/stock?user=app&password=xxxxx&sslmode=disable"},
		{"PostgresURLSSLPasswordParam", "postgres://app:a@db/stock?sslpassword=s3cret#frag", "postgres://app:xxxxx@db/stock?sslpassword=xxxxx#frag"},
		{"PostgresURLMultiHost", "postgres://app:s3cret@h1:5432,h2:5432/stock", "postgres://app:xxxxx@h1:5432,h2:5432/stock"},
		{"URLPasswordWithAt", "postgres://app:p@ss@db/stock", "postgres://app:xxxxx@db/stock"},
		{"URLPasswordWithSlash", "amqp://app:pa/ss@rabbit/vhost", "amqp://app:xxxxx@rabbit/vhost"},
		{"URLEmptyPassword", "amqp://app:@rabbit/", "amqp://app:xxxxx@rabbit/"},
		{"AMQPURL", "amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"AMQPSURLVhost", "amqps://platformd:s3cret@rabbit.internal:5671/shop", "amqps://platformd:xxxxx@rabbit.internal:5671/shop"},
		{"AMQPURLNoCredentials", "amqp://rabbit.internal/", "amqp://rabbit.internal/"},
		{"KeyValue", "host=db user=app password=s3cret dbname=stock", "host=db user=app password=xxxxx dbname=stock"},
		{"KeyValueQuoted", `host=db password='s3 cr\'et' dbname=stock`, "host=db password=xxxxx dbname=stock"},
		{"KeyValueSpacesAroundEquals", "host=db password = s3cret dbname=stock", "host=db password=xxxxx dbname=stock"},
		{"KeyValueLast", "host=db password=s3cret", "host=db password=xxxxx"},
		{"KeyValueSSLPassword", "host=db sslpassword=s3cret", "host=db sslpassword=xxxxx"},
		{"KeyValueNoPassword", "host=db user=app dbname=stock", "host=db user=app dbname=stock"},
		{"KeyValueUnterminatedQuote", "host=db password='s3cret", "host=db password=xxxxx"},
		{"Empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, RedactURL(tt.in))
		})
	}
}
