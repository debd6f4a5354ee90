# frozen_string_literal: true

require_relative "helper"

# The same Redmutex::Client.new on a Redis Cluster's seed list: each name goes
# to the master of its hash slot. The cluster (3 masters) comes from
# tests/rmserver.py serve --cluster; redis-cli on each master tells where a
# key is.
class TestCluster < Minitest::Test
  RMSERVER = File.expand_path("../../../tests/rmserver.py", __dir__)

  def setup
    @cluster = IO.popen(["python3", RMSERVER, "serve", "--cluster", "3:0"], "r")
    line = Timeout.timeout(60) { @cluster.gets } or raise "tests/rmserver.py started no cluster"
    @info = line.split.to_h { |pair| pair.split("=", 2) }
    @url = @info.fetch("url")
  end

  def teardown
    @cluster.close
  end

  # The masters that hold key name (one while it is held, none once released).
  def holders(name)
    @info.fetch("ports").split(",").select do |port|
      IO.popen([@info.fetch("cli"), "-p", port, "EXISTS", name], err: File::NULL, &:read).strip == "1"
    end
  end

  def test_locks_on_a_cluster_url_go_to_each_names_master
    client = Redmutex::Client.new(@url)
    owners = {}
    6.times do |k|
      name = "rb:cluster:#{k}"
      client.lock(name).synchronize do
        held = holders(name)
        assert_equal 1, held.size, "#{name} held on its master"
        owners[held.first] = true
      end
      assert_empty holders(name), "#{name} released"
    end
    assert_operator owners.size, :>=, 2, "the names all landed on one master"
    rlock = client.rlock("rb:cluster:re")
    rlock.synchronize { rlock.synchronize { assert_equal 1, holders("rb:cluster:re").size } }
  ensure
    client&.close
  end
end
