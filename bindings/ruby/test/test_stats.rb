# frozen_string_literal: true

require_relative "helper"

# client.stats is the C core's snapshot; the library's log messages reach
# Redmutex.logger (else Kernel#warn) on Ruby's thread.
class TestStats < Minitest::Test
  def setup
    RedisServer.cli("FLUSHALL")
    @client = Redmutex::Client.new(RedisServer.url)
  end

  def teardown
    @client.close
  end

  def test_n_acquisitions_give_n_counts_and_n_hold_samples
    lock = @client.lock("rb:stats")
    5.times { lock.synchronize { assert_equal 1, @client.stats["locks_held"] } }
    lock.acquire
    refute @client.lock("rb:stats").try_lock
    stats = @client.stats
    assert_equal 6, stats["acquire_wait_seconds.lock.acquired.count"]
    assert_equal 5, stats["hold_seconds.lock.count"]
    assert_equal 5, stats["hold_seconds.lock.bucket.+Inf"]
    assert_equal 1, stats["acquire_wait_seconds.lock.timeout.count"]
    assert_equal 1, stats["locks_held"]
    assert_equal 0, stats["locks_lost"]
    assert_equal 1, stats["counting"]
    assert_operator stats["servers[#{RedisServer.url}].round_trip_seconds.count"], :>=, 12
    lock.release
  end

  class Captured
    attr_reader :lines

    def initialize
      @lines = []
    end

    def warn(message)
      @lines << [:warn, message]
    end

    def info(message)
      @lines << [:info, message]
    end
  end

  def test_an_unreachable_server_is_logged_to_the_logger
    logger = Captured.new
    Redmutex.logger = logger
    dead = Redmutex::Client.new("redis://127.0.0.1:1")
    assert_raises(Redmutex::ConnectionError) { dead.lock("rb:dead").acquire }
    assert_includes logger.lines.map(&:first), :warn
    assert(logger.lines.any? { |_, m| m.include?("redis://127.0.0.1:1/0 is unreachable") })
    assert_equal 1, dead.stats["servers[redis://127.0.0.1:1/0].errors.connection"]
    dead.close
  ensure
    Redmutex.logger = nil
  end
end
