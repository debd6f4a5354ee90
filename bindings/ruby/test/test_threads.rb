# frozen_string_literal: true

require_relative "helper"

# A waiting acquire releases the GVL and can be interrupted.
class TestThreads < Minitest::Test
  def setup
    RedisServer.cli("FLUSHALL")
    # A long backoff: only an interrupt or a release can end these waits soon.
    @client = Redmutex::Client.new(RedisServer.url, wait_backoff_cap: 30)
    @holder = @client.lock("rb:busy")
    @holder.acquire
  end

  def teardown
    @holder.release if @holder.state == :held
    @client.close
  end

  def test_other_threads_run_while_one_waits
    waiter = Thread.new { @client.lock("rb:busy").acquire(3) }
    wait_until(5, "the waiter to block") { waiter.status == "sleep" }
    ticks = 0
    start = RedisServer.now
    ticks += 1 while RedisServer.now - start < 0.3
    assert_operator ticks, :>, 1000, "the main thread ran while the other waited"
    @holder.release
    assert_equal true, waiter.value
  end

  def test_thread_raise_ends_the_wait_with_nothing_held
    lock = @client.lock("rb:busy")
    waiter = Thread.new do
      lock.acquire
    rescue RuntimeError => e
      e
    end
    wait_until(5, "the waiter to block") { waiter.status == "sleep" }
    start = RedisServer.now
    waiter.raise(RuntimeError, "stop waiting")
    result = waiter.value
    assert_operator RedisServer.now - start, :<, 2, "the interrupt ended the wait promptly"
    assert_equal "stop waiting", result.message
    assert_equal :unlocked, lock.state
  end

  def test_timeout_module_ends_the_wait
    lock = @client.lock("rb:busy")
    start = RedisServer.now
    assert_raises(Timeout::Error) { Timeout.timeout(0.3) { lock.acquire } }
    assert_operator RedisServer.now - start, :<, 2
    assert_equal :unlocked, lock.state
  end

  def test_a_wait_ended_for_another_thread_goes_on
    patient = Thread.new { @client.lock("rb:busy").acquire(5) }
    impatient = Thread.new do
      @client.lock("rb:busy").acquire
    rescue RuntimeError
      :interrupted
    end
    wait_until(5, "both waiters to block") { patient.status == "sleep" && impatient.status == "sleep" }
    impatient.raise(RuntimeError, "stop")
    assert_equal :interrupted, impatient.value
    sleep 0.2
    assert patient.alive?, "the other thread's wait went on"
    @holder.release
    assert_equal true, patient.value
  end

  def test_pending_ruby_interrupts_of_other_kinds_never_fail_a_pair
    # Ruby has interrupts pending now and then for its own work (the timer's
    # time-slice check, finalizers): a blocking region does not start while
    # one is, and that must not look like Ctrl-C. A Ruby with one thread, as
    # most scripts are, meets the timer's every 100 ms.
    code = <<~RUBY
      require "redmutex"
      lock = Redmutex::Client.new(ARGV[0]).lock("rb:pending")
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1.5
      pairs = 0
      lock.synchronize { pairs += 1 } while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      puts pairs
    RUBY
    out = IO.popen({ "RUBYLIB" => child_rubylib }, [RbConfig.ruby, "-e", code, RedisServer.url], err: %i[child out],
                   &:read)
    assert $?.success?, out
    assert_operator out.to_i, :>, 10
  end

  def test_release_after_handoff_wakes_the_waiter_by_notification
    lock = @client.lock("rb:busy")
    waiter = Thread.new { lock.acquire(10) && RedisServer.now }
    wait_until(5, "the waiter to block") { waiter.status == "sleep" }
    released = RedisServer.now
    @holder.release
    acquired = waiter.value
    assert_operator acquired - released, :<, 2, "woken by the release, not by the 30 s backoff"
    lock.release
  end
end
