package testenv

import "testing"

func TestURLsFollowTheEnvironment(t *testing.T) {
	t.Setenv("TEST_DATABASE_URL", "")
	t.Setenv("TEST_AMQP_URL", "")
	if DatabaseURL() != DefaultDatabaseURL || AMQPURL() != DefaultAMQPURL {
		t.Fatalf("unset: %s %s, want the defaults", DatabaseURL(), AMQPURL())
	}
	t.Setenv("TEST_DATABASE_URL", "postgres://elsewhere/postgres")
	t.Setenv("TEST_AMQP_URL", "amqp://elsewhere/")
	if DatabaseURL() != "postgres://elsewhere/postgres" || AMQPURL() != "amqp://elsewhere/" {
		t.Fatalf("set: %s %s, want the variables", DatabaseURL(), AMQPURL())
	}
}
