# frozen_string_literal: true

require_relative "helper"

# Objects that cannot be made on their own or copied, and methods called on an
# object that is not a live one (allocated without a constructor), raise a
# clear error; nothing crashes or recurses. Each case runs in a child ruby, so
# that a crash fails the case, not the suite.
class TestBadSelf < Minitest::Test
  def error_of(code)
    status, out = run_ruby(<<~RUBY, RedisServer.url)
      require "redmutex"
      client = Redmutex::Client.new(ARGV[0])
      begin
        #{code}
        puts "survived"
      rescue Exception => e # rubocop:disable Lint/RescueException
        puts "\#{e.class}: \#{e.message}"
      end
    RUBY
    assert status.success?, "the child crashed: #{status.inspect}\n#{out}"
    out.chomp
  end

  def test_lock_new_cannot_make_a_lock
    assert_match(/\ARedmutex::InvalidArgument: .*made by a client/, error_of("Redmutex::Lock.new"))
  end

  def test_a_method_of_an_allocated_lock_raises_instead_of_recursing
    assert_match(/\ARedmutex::InvalidArgument: .*called on nothing/, error_of("Redmutex::Lock.allocate.name"))
  end

  def test_a_method_of_an_allocated_client_raises_instead_of_recursing
    assert_match(/\ARedmutex::InvalidArgument: .*called on nothing/, error_of("Redmutex::Client.allocate.close"))
  end

  def test_inspect_of_an_allocated_object_works
    assert_equal "#<Redmutex::Lock (not made by a client)>\nsurvived", error_of("puts Redmutex::Lock.allocate.inspect")
    assert_equal "#<Redmutex::Client (not made by Client.new)>\nsurvived",
                 error_of("puts Redmutex::Client.allocate.inspect")
  end

  def test_dup_and_clone_of_a_client_raise_type_error
    assert_match(/\ATypeError: .*cannot be copied/, error_of("client.dup"))
    assert_match(/\ATypeError: .*cannot be copied/, error_of("client.clone"))
  end

  def test_dup_and_clone_of_a_lock_raise_type_error
    assert_match(/\ATypeError: .*cannot be copied/, error_of("client.lock('rb:self').dup"))
    assert_match(/\ATypeError: .*cannot be copied/, error_of("client.rlock('rb:self').clone"))
  end
end
