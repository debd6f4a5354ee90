# frozen_string_literal: true

# A private redis-server for the Ruby binding's tests, from tests/rmserver.py
# (the helper every suite shares; CONTRIBUTING.md, "Test servers"): the
# binary of $REDMUTEX_TEST_SERVER or Debian's, on a Unix socket in a temporary
# directory (no port to race for), no persistence. The helper stops it when
# this process closes its end of the pipe, however the process ends. No
# server binary fails the suite, never skips it. Tests look at the server
# with redis-cli.
require "minitest"
require "tmpdir"
require "timeout"
require "rbconfig"
require "redmutex"

module RedisServer
  module_function

  RMSERVER = File.expand_path("../../../tests/rmserver.py", __dir__)

  def start
    @pipe = IO.popen(["python3", RMSERVER, "serve", "--unix"])
    line = @pipe.gets or raise "tests/rmserver.py started no server (its message is above)"
    @info = line.split.to_h { |pair| pair.split("=", 2) }
    @socket = @info.fetch("socket")
    at_exit { stop }
  end

  # Closing the pipe stops the server; close waits until the helper has removed it.
  def stop
    return unless @pipe

    @pipe.close
    @pipe = nil
  end

  def url
    "unix://#{@socket}"
  end

  def socket
    @socket
  end

  def cli(*args)
    IO.popen([@info.fetch("cli"), "-s", @socket, *args.map(&:to_s)], err: File::NULL, &:read).chomp
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end

# Waits until the block is true, or fails after `seconds`.
def wait_until(seconds = 5, message = "condition")
  deadline = RedisServer.now + seconds
  until yield
    raise Minitest::Assertion, "timed out waiting for #{message}" if RedisServer.now > deadline

    sleep 0.01
  end
end

# Commands the server ran since the last CONFIG RESETSTAT, by name, apart
# from the test's own CONFIG and INFO.
def commands_since_reset
  RedisServer.cli("INFO", "commandstats").lines.filter_map do |line|
    name = line[/\Acmdstat_([^:]+):/, 1]
    name unless name.nil? || name.start_with?("config") || name == "info"
  end
end

# RUBYLIB for a child ruby that must load the same redmutex as this process.
def child_rubylib
  %w[redmutex.rb redmutex_native.so].map { |f| File.dirname($LOADED_FEATURES.grep(%r{/#{f}\z}).first) }.join(":")
end

# Waits until a client waits for lock `name` (it subscribed to the lock's channel).
def wait_for_waiter(name)
  wait_until(10, "a waiter on #{name}") do
    RedisServer.cli("PUBSUB", "NUMSUB", "redisson_lock__channel:{#{name}}").lines.last.to_i.positive?
  end
end

# Runs `code` in a child ruby that loads the same redmutex as this process, with SIGINT back at
# its default (a shell started in the background hands its children SIGINT ignored; every other
# signal a test sends, the child handles itself): [Process::Status, stdout and stderr, seconds].
def run_ruby(code, *args)
  require "open3"
  start = RedisServer.now
  out, status = Open3.capture2e({ "RUBYLIB" => child_rubylib }, "env", "--default-signal=INT", RbConfig.ruby,
                                "-e", code, *args.map(&:to_s))
  [status, out, RedisServer.now - start]
end

# Reads `io` until a line matches `pattern`; fails after `seconds`. Returns the line.
def expect_line(io, pattern, seconds = 10)
  deadline = RedisServer.now + seconds
  loop do
    left = deadline - RedisServer.now
    raise Minitest::Assertion, "timed out waiting for a line like #{pattern.inspect}" if left <= 0
    next unless IO.select([io], nil, nil, left)

    line = io.gets
    raise Minitest::Assertion, "the child closed its output before a line like #{pattern.inspect}" if line.nil?
    return line.chomp if line.chomp.match?(pattern)
  end
end

# Frees the plain lock `name` as another holder's release would: DEL and the release message.
def hand_over(name)
  RedisServer.cli("DEL", name)
  RedisServer.cli("PUBLISH", "redisson_lock__channel:{#{name}}", "0")
end
