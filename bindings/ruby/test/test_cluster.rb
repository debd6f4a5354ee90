# frozen_string_literal: true

require_relative "helper"

# The same Redmutex::Client.new on a Redis Cluster's seed list: each name goes
# to the master of its hash slot. The cluster comes from tests/rmcluster.py
# (3 masters), driven over a pipe.
class TestCluster < Minitest::Test
  RMCLUSTER = File.expand_path("../../../tests/rmcluster.py", __dir__)

  def setup
    @cluster = IO.popen(["python3", RMCLUSTER, "serve"], "r+")
    line = Timeout.timeout(60) { @cluster.gets }
    raise "no cluster: #{line.inspect}" unless line&.start_with?("URL ")

    @url = line.split(" ", 2).last.chomp
  end

  def teardown
    @cluster.close
  end

  def ask(request)
    @cluster.puts(request)
    @cluster.flush
    @cluster.gets.chomp
  end

  def test_locks_on_a_cluster_url_go_to_each_names_master
    client = Redmutex::Client.new(@url)
    owners = {}
    6.times do |k|
      name = "rb:cluster:#{k}"
      client.lock(name).synchronize do
        assert_equal "1", ask("exists #{name}")
        owners[ask("owner #{name}")] = true
      end
      assert_equal "0", ask("exists #{name}")
    end
    assert_operator owners.size, :>=, 2, "the names all landed on one master"
    rlock = client.rlock("rb:cluster:re")
    rlock.synchronize { rlock.synchronize { assert_equal "1", ask("exists rb:cluster:re") } }
  ensure
    client&.close
  end
end
