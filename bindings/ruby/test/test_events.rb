# frozen_string_literal: true

require_relative "helper"

# Lost-lock news reaches Ruby through the client's event fd, on Ruby's thread.
class TestEvents < Minitest::Test
  def setup
    RedisServer.cli("FLUSHALL")
    @client = Redmutex::Client.new(RedisServer.url, watchdog_lease: 0.6)
  end

  def teardown
    @client.close
  end

  def test_a_lock_deleted_under_the_watchdog_is_reported_by_lost_and_on_lost
    news = []
    lock = @client.lock("rb:ev").on_lost { |l, state, owner| news << [l, state, owner, Thread.current] }
    lock.acquire
    RedisServer.cli("DEL", "rb:ev")
    assert IO.select([@client.event_io], nil, nil, 5), "the event fd became readable"
    wait_until(5, "the news") { @client.dispatch_events.positive? && news.any? }
    assert_equal [[lock, :lost, nil, Thread.current]], news
    assert lock.lost?
    assert_raises(Redmutex::LockLostError) { lock.release }
    assert_equal 0, @client.dispatch_events
    assert_nil IO.select([@client.event_io], nil, nil, 0), "drained: no longer readable"
  end

  def test_news_of_locks_without_a_handler_is_drained_and_ids_match
    lock = @client.lock("rb:ev2", lease: 0.2)
    lock.acquire
    wait_until(5, "the news") { (event = @client.next_event) && (@event = event) }
    assert_equal [lock.id, :lost, nil], @event
    assert_equal 0, @client.events_dropped
  end
end
