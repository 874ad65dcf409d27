import Foundation

/// An object that presents a file or directory to the user, and wants to be asked before others
/// touch it and told after they did.
///
/// The Linux counterpart of Foundation's `NSFilePresenter` on Apple platforms. Register a
/// presenter with ``FileCoordinator/addFilePresenter(_:)``; from then on every coordinated access
/// to ``presentedItemURL`` (or, for a directory, to anything inside it) messages it:
///
/// - before a coordinated read, ``savePresentedItemChanges()`` (unless the reader passed
///   ``FileCoordinator/ReadingOptions/withoutChanges``) and then
///   ``relinquishPresentedItem(toReader:)``;
/// - before a coordinated write, ``relinquishPresentedItem(toWriter:)``, preceded by
///   ``savePresentedItemChanges()`` for ``FileCoordinator/WritingOptions/forMerging`` and by
///   ``accommodatePresentedItemDeletion()`` for ``FileCoordinator/WritingOptions/forDeleting``;
/// - after the access, the reacquirer it handed over, then ``presentedItemDidChange()``,
///   ``presentedItemDidMove(to:)`` or ``accommodatePresentedItemDeletion()`` as fits what happened.
///
/// A presenter of a directory also gets the subitem messages for items inside it.
///
/// When a file-sync engine makes a copy of the item (a conflict copy, see ``FileVersion``), the
/// presenter hears ``presentedItemDidGain(_:)``; when the copy goes, ``presentedItemDidLose(_:)``;
/// when someone marks it resolved, ``presentedItemDidResolveConflict(_:)``. A directory's
/// presenter hears the subitem forms for the items inside it.
///
/// Every hook has a do-nothing default, so a presenter implements only what it needs. Each
/// presenter receives its messages one at a time, in order, on a serial queue of its own; no
/// message is sent while the coordination that caused it holds its locks, so a presenter may
/// itself coordinate inside any hook. The coordinator that a presenter passes to
/// ``FileCoordinator/init(filePresenter:)`` sends that presenter no messages about its own
/// accesses.
///
/// The messages come from coordinations in any process on the machine that coordinates through
/// Concord (with the same ``LockDirectory``), in the same order and with the same meaning; a veto
/// fails a coordination in another process as it fails one in this process. Changes made without
/// coordination (another program, a sync engine) reach the presenter only afterwards, as
/// did-change, did-move and deletion messages; the presenter follows its item when it, or any
/// folder above it, is renamed.
///
/// Hooks that may veto (`savePresentedItemChanges`, `accommodatePresentedItemDeletion`,
/// `accommodatePresentedSubitemDeletion(at:)`) do so by throwing: the coordination then fails
/// with ``FileCoordinationError/Code/presenterFailed`` and its accessor never runs.
///
/// Each of those three also comes in Apple's completion-handler form
/// (``savePresentedItemChanges(completionHandler:)`` and the like), for a presenter that answers
/// later or from another thread, and for code written against `NSFilePresenter`. Implement one
/// form of each: the coordinator calls the completion-handler form, whose default calls the
/// throwing one. A presenter class that inherits its conformance must implement the hooks it
/// wants in the class that declares the conformance (a subclass's method is not a witness).
public protocol FilePresenter: AnyObject, Sendable {
    /// The item this presenter presents, or `nil` while it presents nothing.
    ///
    /// A presenter told ``presentedItemDidMove(to:)`` should return the new location from then on.
    var presentedItemURL: URL? { get }

    /// Asks the presenter to stop reading or writing the item while another reader reads it.
    ///
    /// Call `reader` once, possibly later and from any thread, when the item is relinquished; pass
    /// it a closure to be told when the reader is done, or `nil`. The reader waits for the call
    /// (as long as its coordinator's timeout allows).
    func relinquishPresentedItem(toReader reader: @escaping @Sendable (_ reacquirer: (@Sendable () -> Void)?) -> Void)

    /// Asks the presenter to stop reading or writing the item while a writer changes it.
    ///
    /// Call `writer` once, possibly later and from any thread, when the item is relinquished;
    /// pass it a closure to be told when the writer is done (that is where to reload), or `nil`.
    func relinquishPresentedItem(toWriter writer: @escaping @Sendable (_ reacquirer: (@Sendable () -> Void)?) -> Void)

    /// Asks the presenter to write any unsaved changes to the item, before someone reads it or
    /// merges into it. Throw to make that coordination fail.
    func savePresentedItemChanges() throws

    /// Tells the presenter that the item is about to be deleted (or, for a deletion it could not
    /// be told of beforehand, that it was). Close it and let go of it. Throw to veto a deletion
    /// that has not happened yet.
    func accommodatePresentedItemDeletion() throws

    /// Apple's form of ``savePresentedItemChanges()``: call `completionHandler` once, possibly
    /// later and from any thread, with `nil` when the changes are saved or an error to make the
    /// coordination fail.
    ///
    /// The coordinator calls this form; the default calls ``savePresentedItemChanges()``.
    func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void)

    /// Apple's form of ``accommodatePresentedItemDeletion()``: call `completionHandler` once,
    /// possibly later and from any thread, with `nil` when the item is let go of or an error to
    /// veto the deletion.
    ///
    /// The coordinator calls this form; the default calls ``accommodatePresentedItemDeletion()``.
    func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void)

    /// Tells the presenter that the item moved; from now on ``presentedItemURL`` should be `newURL`.
    func presentedItemDidMove(to newURL: URL)

    /// Tells the presenter that the item's content or attributes changed.
    func presentedItemDidChange()

    /// Tells a directory's presenter that an item appeared inside it.
    func presentedSubitemDidAppear(at url: URL)

    /// Tells a directory's presenter that an item inside it changed.
    func presentedSubitemDidChange(at url: URL)

    /// Tells a directory's presenter that an item inside it moved.
    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL)

    /// Tells a directory's presenter that an item inside it is about to be deleted. Throw to veto.
    func accommodatePresentedSubitemDeletion(at url: URL) throws

    /// Apple's form of ``accommodatePresentedSubitemDeletion(at:)``: call `completionHandler`
    /// once, possibly later and from any thread, with `nil` or an error to veto the deletion.
    ///
    /// The coordinator calls this form; the default calls
    /// ``accommodatePresentedSubitemDeletion(at:)``.
    func accommodatePresentedSubitemDeletion(
        at url: URL,
        completionHandler: @escaping @Sendable ((any Error)?) -> Void
    )

    /// Tells the presenter that a file-sync engine made a copy of the item (a conflict copy, or a
    /// backup): a new ``FileVersion`` among its ``FileVersion/otherVersionsOfItem(at:)``.
    func presentedItemDidGain(_ version: FileVersion)

    /// Tells the presenter that one of the item's other versions is gone (removed or moved away,
    /// by this process, another one, or the engine carrying another device's resolution).
    func presentedItemDidLose(_ version: FileVersion)

    /// Tells the presenter that a conflict version of the item was marked resolved
    /// (``FileVersion/isResolved``), in this process or another one on the machine.
    func presentedItemDidResolveConflict(_ version: FileVersion)

    /// Tells a directory's presenter that the item at `url` inside it gained a version.
    func presentedSubitem(at url: URL, didGain version: FileVersion)

    /// Tells a directory's presenter that the item at `url` inside it lost a version.
    func presentedSubitem(at url: URL, didLose version: FileVersion)

    /// Tells a directory's presenter that a conflict version of the item at `url` inside it was
    /// marked resolved.
    func presentedSubitem(at url: URL, didResolve version: FileVersion)
}

/// Do-nothing defaults: a presenter implements only the hooks it needs. Relinquishing hands the
/// item over at once and asks for no reacquirer; the vetoing hooks never veto; the
/// completion-handler forms call the throwing forms.
extension FilePresenter {
    /// Hands the item over at once and asks for no reacquirer.
    public func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        reader(nil)
    }
    /// Hands the item over at once and asks for no reacquirer.
    public func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        writer(nil)
    }
    /// Saves nothing.
    public func savePresentedItemChanges() throws {}
    /// Lets the deletion go ahead.
    public func accommodatePresentedItemDeletion() throws {}
    /// Does nothing (``presentedItemURL`` is the presenter's to update).
    public func presentedItemDidMove(to newURL: URL) {}
    /// Does nothing.
    public func presentedItemDidChange() {}
    /// Does nothing.
    public func presentedSubitemDidAppear(at url: URL) {}
    /// Does nothing.
    public func presentedSubitemDidChange(at url: URL) {}
    /// Does nothing.
    public func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {}
    /// Lets the deletion go ahead.
    public func accommodatePresentedSubitemDeletion(at url: URL) throws {}
    /// Does nothing.
    public func presentedItemDidGain(_ version: FileVersion) {}
    /// Does nothing.
    public func presentedItemDidLose(_ version: FileVersion) {}
    /// Does nothing.
    public func presentedItemDidResolveConflict(_ version: FileVersion) {}
    /// Does nothing.
    public func presentedSubitem(at url: URL, didGain version: FileVersion) {}
    /// Does nothing.
    public func presentedSubitem(at url: URL, didLose version: FileVersion) {}
    /// Does nothing.
    public func presentedSubitem(at url: URL, didResolve version: FileVersion) {}

    /// Calls ``savePresentedItemChanges()`` and hands `completionHandler` what it threw.
    public func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        completionHandler(Self.failure { try savePresentedItemChanges() })
    }
    /// Calls ``accommodatePresentedItemDeletion()`` and hands `completionHandler` what it threw.
    public func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        completionHandler(Self.failure { try accommodatePresentedItemDeletion() })
    }
    /// Calls ``accommodatePresentedSubitemDeletion(at:)`` and hands `completionHandler` what it threw.
    public func accommodatePresentedSubitemDeletion(
        at url: URL,
        completionHandler: @escaping @Sendable ((any Error)?) -> Void
    ) {
        completionHandler(Self.failure { try accommodatePresentedSubitemDeletion(at: url) })
    }

    private static func failure(_ body: () throws -> Void) -> (any Error)? {
        do {
            try body()
            return nil
        } catch {
            return error
        }
    }
}
