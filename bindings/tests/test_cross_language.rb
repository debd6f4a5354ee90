# frozen_string_literal: true

# Ruby, Perl, Tcl, Lua and Python on one lock name. Run by ctest with the
# other languages' module paths in the environment and REDMUTEX_PYTHON
# naming a Python with the redmutex package.
require_relative "../ruby/test/helper"

class TestCrossLanguage < Minitest::Test
  HERE = __dir__

  def env
    { "RUBYLIB" => child_rubylib }
  end

  def test_a_ruby_holder_blocks_a_perl_waiter_which_is_woken_by_the_release
    RedisServer.cli("FLUSHALL")
    client = Redmutex::Client.new(RedisServer.url)
    lock = client.lock("x:cross")
    lock.acquire
    IO.popen(env, ["perl", File.join(HERE, "waiter.pl"), RedisServer.url, "x:cross"]) do |perl|
      assert_equal "waiting\n", perl.gets
      wait_for_waiter("x:cross")
      sleep 0.3 # the waiter keeps waiting while Ruby holds the lock
      assert_equal "1", RedisServer.cli("EXISTS", "x:cross")
      released = RedisServer.now
      lock.release
      acquired = Float(perl.gets)
      assert_operator acquired, :>, released, "Perl got the lock only after Ruby released it"
      assert_operator acquired - released, :<, 1.0,
                      "woken by the release message (#{acquired - released} s), not by the 30 s backoff"
    end
    assert $?.success?
  ensure
    client&.close
  end

  def test_a_counter_incremented_by_five_languages_under_one_lock_stays_exact
    RedisServer.cli("FLUSHALL")
    counter = File.join(Dir.mktmpdir("redmutex-cross-"), "counter")
    File.write(counter, "0")
    iterations = 60
    python = ENV.fetch("REDMUTEX_PYTHON")
    commands = [
      [RbConfig.ruby, "worker.rb"], ["perl", "worker.pl"], ["tclsh", "worker.tcl"], ["lua5.4", "worker.lua"],
      [python, "worker.py"]
    ]
    # The test holds the lock until every worker waits for it, so that all
    # five contend from the first increment on.
    client = Redmutex::Client.new(RedisServer.url)
    gate = client.lock("x:counter")
    gate.acquire
    pids = commands.map do |interpreter, script|
      Process.spawn(env, interpreter, File.join(HERE, script), RedisServer.url, "x:counter", counter,
                    iterations.to_s)
    end
    wait_until(30, "five waiting workers") do
      RedisServer.cli("PUBSUB", "NUMSUB", "redisson_lock__channel:{x:counter}").lines.last.to_i == commands.size
    end
    gate.release
    statuses = pids.map { |pid| Process.wait2(pid).last }
    assert statuses.all?(&:success?), statuses.inspect
    assert_equal iterations * commands.size, File.read(counter).to_i
    assert_equal "0", RedisServer.cli("EXISTS", "x:counter")
  ensure
    client&.close
  end
end
