# frozen_string_literal: true

require_relative "helper"

# A script that ends without closing its client releases the locks it still
# holds, however it ends: the end of the script, an exception, exit, a signal
# whose trap exits. Only leave_locks_on_close keeps them; a forked child that
# exits leaves its parent's locks alone.
class TestExit < Minitest::Test
  def setup
    RedisServer.cli("FLUSHALL")
  end

  def run_holder(body, options = "")
    run_ruby(<<~RUBY, RedisServer.url)
      require "redmutex"
      $stdout.sync = true
      client = Redmutex::Client.new(ARGV[0]#{options})
      #{body}
    RUBY
  end

  {
    "the_end_of_the_script" => ["client.lock('rb:exit', lease: 60).acquire; puts 'held'", 0],
    "an_exception" => ["client.rlock('rb:exit').acquire; puts 'held'; raise 'boom'", 1],
    "exit_3" => ["client.fair_lock('rb:exit').acquire; puts 'held'; exit 3", 3],
    "a_lock_collected_while_it_held" =>
      ["client.lock('rb:exit', lease: 60).acquire; GC.start; puts 'held'", 0],
    "synchronize_left_by_exit" => ["client.write_lock('rb:exit').synchronize { puts 'held'; exit 0 }", 0],
  }.each do |name, (body, code)|
    define_method("test_#{name}_releases_the_locks") do
      status, out, seconds = run_holder(body)
      assert_equal code, status.exitstatus, out
      assert_match(/\Aheld\n/, out)
      assert_equal "0", RedisServer.cli("EXISTS", "rb:exit"), "released by the time the script has exited"
      assert_operator seconds, :<, 10, "the exit did not hang"
    end
  end

  def test_a_trap_that_exits_releases_the_locks
    rd, wr = IO.pipe
    pid = Process.spawn({ "RUBYLIB" => child_rubylib }, RbConfig.ruby, "-e", <<~RUBY, RedisServer.url, out: wr)
      require "redmutex"
      $stdout.sync = true
      Signal.trap("TERM") { exit 1 }
      Redmutex::Client.new(ARGV[0]).lock("rb:exit").acquire
      puts "held"
      sleep 60
    RUBY
    wr.close
    expect_line(rd, /\Aheld\z/)
    Process.kill("TERM", pid)
    _, status = Process.wait2(pid)
    assert_equal 1, status.exitstatus
    assert_equal "0", RedisServer.cli("EXISTS", "rb:exit")
  ensure
    rd&.close
  end

  def test_leave_locks_on_close_leaves_them_to_expire
    status, out = run_holder("client.lock('rb:exit', lease: 60).acquire; puts 'held'", ", leave_locks_on_close: true")
    assert status.success?, out
    assert_operator RedisServer.cli("PTTL", "rb:exit").to_i, :>, 50_000
  end

  def test_a_forked_child_that_exits_leaves_its_parents_locks_alone
    status, out = run_holder(<<~RUBY)
      lock = client.lock("rb:exit", lease: 60)
      lock.acquire
      pid = fork { exit 0 }
      Process.wait(pid)
      puts "child exited \#{$?.exitstatus}; parent owns: \#{lock.owned?}"
    RUBY
    assert status.success?, out
    assert_equal "child exited 0; parent owns: true\n", out
    assert_equal "0", RedisServer.cli("EXISTS", "rb:exit"), "released when the parent exited"
  end
end
