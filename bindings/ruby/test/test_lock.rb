# frozen_string_literal: true

require_relative "helper"

class TestLock < Minitest::Test
  def setup
    RedisServer.cli("FLUSHALL")
    @client = Redmutex::Client.new(RedisServer.url)
  end

  def teardown
    @client.close
  end

  def test_acquire_and_release_change_the_key
    lock = @client.lock("rb:plain")
    assert_equal true, lock.acquire
    assert_equal "1", RedisServer.cli("EXISTS", "rb:plain")
    assert_equal :held, lock.state
    assert lock.locked?
    assert lock.owned?
    lock.release
    assert_equal "0", RedisServer.cli("EXISTS", "rb:plain")
    assert_equal :unlocked, lock.state
  end

  def test_acquire_of_a_held_lock_returns_false_after_the_wait
    holder = @client.lock("rb:held")
    holder.acquire
    other = @client.lock("rb:held")
    assert_equal false, other.try_lock
    start = RedisServer.now
    assert_equal false, other.acquire(0.2)
    assert_operator RedisServer.now - start, :>=, 0.19
    holder.release
    assert_equal true, other.acquire(0)
    other.release
  end

  def test_synchronize_holds_the_lock_for_the_block_and_returns_its_value
    lock = @client.lock("rb:sync", lease: 5)
    value = lock.synchronize do
      assert_equal "1", RedisServer.cli("EXISTS", "rb:sync")
      ttl = RedisServer.cli("PTTL", "rb:sync").to_i
      assert_operator ttl, :>, 4000
      assert_operator ttl, :<=, 5000
      :done
    end
    assert_equal :done, value
    assert_equal "0", RedisServer.cli("EXISTS", "rb:sync")
  end

  def test_client_lock_takes_keyword_options
    lock = @client.lock("rb:kw", lease: 5, timeout: 2, fencing: true)
    lock.synchronize do
      assert_kind_of Integer, lock.fence
      assert_in_delta 5.0, lock.ttl, 0.5
    end
    assert_nil lock.fence
  end

  def test_synchronize_raises_lock_timeout_when_the_wait_runs_out
    holder = @client.lock("rb:timeout")
    holder.acquire
    waiter = @client.lock("rb:timeout", timeout: 0.3)
    start = RedisServer.now
    error = assert_raises(Redmutex::LockTimeout) { waiter.synchronize { flunk "ran without the lock" } }
    elapsed = RedisServer.now - start
    assert_operator elapsed, :>=, 0.29
    assert_operator elapsed, :<, 5
    assert_kind_of Redmutex::Error, error
    assert_operator Redmutex::LockTimeout, :<, Redmutex::Error
    assert_equal(-3, error.code)
    assert_match(/rb:timeout/, error.message)
    assert_raises(Redmutex::LockTimeout) { waiter.synchronize(timeout: 0) { flunk } }
  ensure
    holder.release
  end

  def test_release_by_a_non_owner_raises_not_owned_error_and_changes_nothing
    holder = @client.lock("rb:owner")
    holder.acquire
    stranger = @client.lock("rb:owner")
    assert_raises(Redmutex::NotOwnedError) { stranger.release }
    assert_equal "1", RedisServer.cli("EXISTS", "rb:owner")
    holder.release
    assert_raises(Redmutex::NotOwnedError) { holder.release }
  end

  def test_reentrant_lock_counts_holds
    rlock = @client.rlock("rb:re")
    field = @client.thread_owner
    rlock.synchronize do
      assert_equal 1, rlock.hold_count
      rlock.synchronize do
        assert_equal 2, rlock.hold_count
        rlock.synchronize { assert_equal "3", RedisServer.cli("HGET", "rb:re", field) }
        assert_equal 2, rlock.hold_count
      end
      assert_equal 1, rlock.hold_count
    end
    assert_equal 0, rlock.hold_count
    assert_equal "0", RedisServer.cli("EXISTS", "rb:re")
  end

  def test_synchronize_releases_when_the_block_raises_and_keeps_its_exception
    lock = @client.lock("rb:raise")
    boom = Class.new(StandardError)
    error = assert_raises(boom) { lock.synchronize { raise boom, "from the block" } }
    assert_equal "from the block", error.message
    assert_equal "0", RedisServer.cli("EXISTS", "rb:raise")
    assert_equal :unlocked, lock.state
  end

  def test_synchronize_releases_on_break_and_throw
    lock = @client.lock("rb:jump")
    [1, 2].each { lock.synchronize { break } }
    assert_equal "0", RedisServer.cli("EXISTS", "rb:jump")
    catch(:out) { lock.synchronize { throw :out } }
    assert_equal "0", RedisServer.cli("EXISTS", "rb:jump")
  end

  def test_synchronize_needs_a_block
    assert_raises(LocalJumpError) { @client.lock("rb:noblock").synchronize }
    assert_equal "0", RedisServer.cli("EXISTS", "rb:noblock")
  end

  def test_lost_lock_is_reported_by_lost_and_by_the_end_of_synchronize
    lock = @client.lock("rb:lost", lease: 0.2)
    error = assert_raises(Redmutex::LockLostError) do
      lock.synchronize { wait_until(5, "the lease to run out") { lock.lost? } }
    end
    assert_match(/rb:lost/, error.message)
    assert_kind_of Redmutex::NotOwnedError, error, "as in Python: no longer owned"
    refute lock.lost?
  end

  def test_client_synchronize_uses_a_fresh_lock
    assert_equal 7, @client.synchronize("rb:client-sync", timeout: 1) { 7 }
    assert_equal 2, @client.synchronize("rb:client-sync", reentrant: true) { @client.rlock("rb:client-sync").hold_count + 1 }
  end

  def test_closed_client_raises_closed_error
    client = Redmutex::Client.new(RedisServer.url)
    client.close
    assert client.closed?
    assert_raises(Redmutex::ClosedError) { client.lock("rb:closed") }
  end
end
