# frozen_string_literal: true

require_relative "helper"

class TestSemaphore < Minitest::Test
  def setup
    RedisServer.cli("FLUSHALL")
    @client = Redmutex::Client.new(RedisServer.url)
  end

  def teardown
    @client.close
  end

  def test_synchronize_holds_one_permit_for_the_block
    sem = @client.semaphore("rb:sem", 2)
    value = sem.synchronize do
      assert_equal "1", RedisServer.cli("GET", "rb:sem")
      assert_equal "1", RedisServer.cli("ZCARD", "{rb:sem}:timeout")
      :done
    end
    assert_equal :done, value
    assert_equal "2", RedisServer.cli("GET", "rb:sem")
    assert_equal "0", RedisServer.cli("ZCARD", "{rb:sem}:timeout")
  end

  def test_synchronize_gives_the_permit_back_when_the_block_raises
    sem = @client.semaphore("rb:raise", 1)
    assert_raises(ArgumentError) { sem.synchronize { raise ArgumentError, "boom" } }
    assert_equal 1, sem.available
  end

  def test_acquire_returns_a_permit_id_or_nil_and_release_gives_it_back
    sem = @client.semaphore("rb:ids", 2)
    a = sem.acquire
    b = sem.acquire(nil, 1)
    assert_match(/\A\h{32}\z/, a)
    assert_nil sem.try_acquire
    assert_nil sem.acquire(0.2)
    assert_equal 0, sem.available
    sem.release(a)
    sem.release(b)
    assert_equal 2, sem.available
    assert_raises(Redmutex::NotOwnedError) { sem.release(a) }
    assert_equal 2, sem.permits
    assert_equal "rb:ids", sem.name
  end

  def test_a_full_semaphore_makes_synchronize_time_out
    holder = @client.semaphore("rb:full", 1)
    permit = holder.acquire
    other = @client.semaphore("rb:full", 1, timeout: 0.2)
    assert_raises(Redmutex::LockTimeout) { other.synchronize { flunk "ran without a permit" } }
    holder.release(permit)
  end

  def test_bad_input_is_refused_and_changes_nothing
    assert_raises(Redmutex::InvalidArgument) { @client.semaphore("rb:bad", 0) }
    assert_raises(Redmutex::InvalidArgument) { @client.semaphore("rb:bad", -1) }
    assert_raises(Redmutex::InvalidArgument) { @client.semaphore("rb:bad", 1.5) }
    assert_raises(Redmutex::InvalidArgument) { @client.semaphore("rb:bad", 2, bogus: 1) }
    sem = @client.semaphore("rb:bad", 2)
    assert_raises(Redmutex::InvalidArgument) { sem.acquire(0, 3) }
    assert_raises(Redmutex::InvalidArgument) { sem.acquire(0, 0) }
    assert_raises(Redmutex::InvalidArgument) { sem.acquire(Float::NAN) }
    assert_raises(Redmutex::InvalidArgument) { sem.release("nope") }
    assert_equal "", RedisServer.cli("KEYS", "*")
    RedisServer.cli("SET", "rb:sized", "5")
    assert_raises(Redmutex::InvalidArgument) { @client.semaphore("rb:sized", 2).acquire(0) }
    assert_equal "5", RedisServer.cli("GET", "rb:sized")
  end

  def test_threads_never_hold_more_than_the_permits
    sem = @client.semaphore("rb:threads", 2)
    inside = 0
    most = 0
    mutex = Mutex.new
    threads = Array.new(5) do
      Thread.new do
        10.times do
          sem.synchronize do
            mutex.synchronize { most = [most, inside += 1].max }
            sleep 0.002
            mutex.synchronize { inside -= 1 }
          end
        end
      end
    end
    threads.each(&:join)
    assert_equal 2, most
  end
end
