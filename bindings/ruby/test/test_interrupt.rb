# frozen_string_literal: true

require_relative "helper"

# Ctrl-C (SIGINT) during a wait, in a child ruby: the wait ends at once, the
# synchronize around it releases, nothing is left on the server.
class TestInterrupt < Minitest::Test
  CHILD = <<~RUBY
    require "redmutex"
    client = Redmutex::Client.new(ARGV[0], wait_backoff_cap: 30)
    client.lock("rb:int:outer").synchronize do
      $stdout.puts "holding"
      $stdout.flush
      client.lock("rb:int:busy").acquire   # waits: the lock is held by someone else
      $stdout.puts "acquired"
    end
  RUBY

  def test_sigint_during_a_wait_ends_it_promptly_with_nothing_held
    RedisServer.cli("FLUSHALL")
    RedisServer.cli("SET", "rb:int:busy", "someone-else")
    out = IO.pipe
    err = IO.pipe
    # (env --default-signal: a shell started in the background hands its
    # children SIGINT ignored, and an ignored SIGINT must stay ignored)
    pid = Process.spawn({ "RUBYLIB" => child_rubylib }, "env", "--default-signal=INT", RbConfig.ruby, "-e", CHILD,
                        RedisServer.url, out: out[1], err: err[1])
    out[1].close
    err[1].close
    assert_equal "holding\n", out[0].gets
    wait_for_waiter("rb:int:busy")
    assert_equal "1", RedisServer.cli("EXISTS", "rb:int:outer")
    start = RedisServer.now
    Process.kill("INT", pid)
    _, status = Process.wait2(pid)
    elapsed = RedisServer.now - start
    assert_operator elapsed, :<, 5, "the wait ended by the interrupt, not by the 30 s backoff"
    assert_equal Signal.list["INT"], status.termsig, "ruby died of its Interrupt, as without redmutex"
    assert_nil out[0].gets, "never acquired"
    assert_match(/Interrupt/, err[0].read)
    assert_equal "0", RedisServer.cli("EXISTS", "rb:int:outer"), "synchronize released on the way out"
    assert_equal "someone-else", RedisServer.cli("GET", "rb:int:busy")
  ensure
    [*out, *err].each { |io| io.close unless io.closed? }
  end

  # A child waiting for rb:int:busy with a trap set by `trap_code`; reports what it ended with.
  TRAPPED = <<~RUBY
    require "redmutex"
    $stdout.sync = true
    client = Redmutex::Client.new(ARGV[0], wait_backoff_cap: 30)
    busy = client.lock("rb:int:busy")
    outer = client.lock("rb:int:outer")
    eval(ARGV[1]) # rubocop:disable Security/Eval
    acquired = error = nil
    begin
      outer.synchronize do
        puts "waiting"
        acquired = busy.acquire(20)
      end
    rescue StandardError => e
      error = e.message
    end
    puts "acquired=\#{acquired.inspect} error=\#{error} owned=\#{busy.owned?} outer=\#{outer.locked?}"
  RUBY

  def run_trapped(trap_code)
    RedisServer.cli("FLUSHALL")
    RedisServer.cli("SET", "rb:int:busy", "someone-else")
    rd, wr = IO.pipe
    pid = Process.spawn({ "RUBYLIB" => child_rubylib }, RbConfig.ruby, "-e", TRAPPED, RedisServer.url, trap_code,
                        out: wr)
    wr.close
    expect_line(rd, /\Awaiting\z/)
    wait_for_waiter("rb:int:busy")
    yield pid, rd
    report = expect_line(rd, /\Aacquired=/, 40)
    Process.wait(pid)
    pid = nil
    report
  ensure
    Process.kill("KILL", pid) if pid
    rd&.close
  end

  def test_a_raising_trap_ends_the_wait_even_as_the_lock_is_handed_over
    report = run_trapped("Signal.trap('TERM') { raise 'terminated' }") do |pid|
      Process.kill("TERM", pid)
      hand_over("rb:int:busy") # freed at the same moment: it must not stay held
    end
    assert_equal "acquired=nil error=terminated owned=false outer=false", report
  end

  def test_a_trap_that_returns_runs_during_the_wait_which_then_goes_on
    report = run_trapped("Signal.trap('USR1') { $stdout.syswrite(\"handler ran\\n\") }") do |pid, rd|
      Process.kill("USR1", pid)
      expect_line(rd, /\Ahandler ran\z/) # while the lock is still held by someone else
      hand_over("rb:int:busy")
    end
    assert_equal "acquired=true error= owned=true outer=false", report
  end
end
