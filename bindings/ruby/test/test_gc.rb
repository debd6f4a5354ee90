# frozen_string_literal: true

require_relative "helper"

# Objects may be collected in any order; a lock keeps its client usable.
class TestGC < Minitest::Test
  def setup
    RedisServer.cli("FLUSHALL")
  end

  def test_a_lock_outlives_its_collected_client
    lock = Redmutex::Client.new(RedisServer.url).lock("rb:orphan")
    GC.start(full_mark: true, immediate_sweep: true)
    assert_equal 3, lock.synchronize { 3 }
    assert_equal "0", RedisServer.cli("EXISTS", "rb:orphan")
  end

  def test_collecting_clients_and_held_locks_in_any_order_neither_crashes_nor_blocks
    start = RedisServer.now
    50.times do |i|
      client = Redmutex::Client.new(RedisServer.url, shutdown_timeout: 5)
      locks = Array.new(3) { |k| client.lock("rb:gc:#{i}:#{k}", lease: 30) }
      locks.each(&:acquire)
      client = nil # rubocop:disable Lint/UselessAssignment
      locks.rotate!(i % 3)
      locks = nil # rubocop:disable Lint/UselessAssignment
      GC.start(full_mark: true, immediate_sweep: true) if i % 10 == 9
    end
    GC.start(full_mark: true, immediate_sweep: true)
    assert_operator RedisServer.now - start, :<, 10, "collection must not wait for the servers"
  end
end
