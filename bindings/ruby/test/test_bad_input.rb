# frozen_string_literal: true

require_relative "helper"

# Bad input raises Redmutex::InvalidArgument before anything is sent.
class TestBadInput < Minitest::Test
  def setup
    RedisServer.cli("FLUSHALL")
    @client = Redmutex::Client.new(RedisServer.url)
    @lock = @client.lock("rb:bad")
    RedisServer.cli("CONFIG", "RESETSTAT")
  end

  def teardown
    @client.close
  end

  def assert_invalid(pattern)
    error = assert_raises(Redmutex::InvalidArgument) { yield }
    assert_match pattern, error.message
    assert_equal(-1, error.code)
  end

  def test_bad_names_types_and_times_send_nothing
    assert_invalid(/lock name is empty/) { @client.lock("") }
    assert_invalid(/lock name must be a string, not Integer/) { @client.lock(42) }
    assert_invalid(/lock name must be a string, not nil/) { @client.lock(nil) }
    assert_invalid(/lock name must be a string, not Hash/) { @client.rlock({}) }
    assert_invalid(/NUL/) { @client.lock("a\0b") }
    assert_invalid(/at most 1024/) { @client.lock("x" * 1025) }
    assert_invalid(/lease must be a finite number of seconds, not NaN/) { @client.lock("x", lease: Float::NAN) }
    assert_invalid(/lease must be a finite number of seconds, not infinity/) { @client.lock("x", lease: Float::INFINITY) }
    assert_invalid(/lease must be a number of seconds, not String/) { @client.lock("x", lease: "5") }
    assert_invalid(/lease must be positive/) { @client.lock("x", lease: 0) }
    assert_invalid(/lease must not be negative/) { @client.lock("x", lease: -1) }
    assert_invalid(/timeout must be a finite number of seconds/) { @lock.acquire(Float::NAN) }
    assert_invalid(/timeout must not be negative/) { @lock.acquire(-2) }
    assert_invalid(/timeout must be a number of seconds, not String/) { @lock.synchronize(timeout: "soon") { flunk } }
    assert_invalid(/too long/) { @lock.acquire(400 * 24 * 3600) }
    assert_invalid(/fencing must be true or false, not Integer/) { @client.lock("x", fencing: 1) }
    assert_invalid(/max_extensions must be an integer, not Float/) { @client.lock("x", max_extensions: 1.5) }
    assert_invalid(/owner is empty/) { @client.lock("x", owner: "") }
    assert_invalid(/unknown option 'leese'/) { @client.lock("x", leese: 5) }
    assert_invalid(/unknown option 'timeout' for a client/) { Redmutex::Client.new(RedisServer.url, timeout: 1) }
    assert_invalid(/seconds must be positive/) { @lock.extend_lease(0) }
    assert_invalid(/keyword arguments/) { @client.lock("x", 5) }
    assert_equal [], commands_since_reset
  end

  def test_bad_urls
    assert_invalid(/at least one server URL/) { Redmutex::Client.new([]) }
    assert_invalid(/server URL must be a string, not Integer/) { Redmutex::Client.new([RedisServer.url, 5]) }
    assert_invalid(/malformed/) { Redmutex::Client.new("http://example.com") }
    assert_invalid(/at most 64/) { Redmutex::Client.new([RedisServer.url] * 65) }
    assert_equal [], commands_since_reset
  end
end
