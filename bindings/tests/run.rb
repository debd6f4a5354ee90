# frozen_string_literal: true

# The cross-language suite (minitest), run by ctest as binding_cross_language.
require_relative "../ruby/test/helper"
RedisServer.start
require_relative "test_cross_language"
exit Minitest.run(ARGV) ? 0 : 1
