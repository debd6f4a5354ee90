# frozen_string_literal: true

require_relative "helper"

# A redis+sentinel:// URL works unchanged: a real Sentinel deployment from
# tests/rmsentinel.py (1 master, 2 replicas, 3 sentinels).
class TestSentinel < Minitest::Test
  HELPER = File.expand_path("../../../tests/rmsentinel.py", __dir__)

  def test_a_sentinel_url_takes_the_lock_on_the_master_they_name
    IO.popen(["python3", HELPER], "r+") do |io|
      url = io.gets.to_s[/^URL (\S+)/, 1]
      refute_nil url, "no Sentinel deployment"
      client = Redmutex::Client.new(url)
      lock = client.lock("rb:sentinel")
      assert_equal true, lock.acquire(0)
      io.puts "master"
      io.flush
      master = io.gets.to_i
      assert_equal "1", `redis-cli -p #{master} EXISTS rb:sentinel`.strip
      lock.release
      client.close
      error = assert_raises(Redmutex::Error) do
        Redmutex::Client.new("#{url}?sentinel_password=hunter22", command_timeout: 0.5).lock("rb:sentinel").acquire(0)
      end
      refute_match(/hunter22/, error.message)
      io.close_write
    end
  end
end
