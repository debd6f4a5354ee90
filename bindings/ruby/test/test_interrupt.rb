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
end
