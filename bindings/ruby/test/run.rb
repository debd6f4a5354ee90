# frozen_string_literal: true

# The Ruby binding's test suite (minitest): ruby -I<src> -I<build> test/run.rb
require_relative "helper"
RedisServer.start
Dir[File.join(__dir__, "test_*.rb")].sort.each { |f| require f }
exit Minitest.run(ARGV) ? 0 : 1
